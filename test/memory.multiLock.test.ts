import * as MemoryBackend from "../src/MemoryBackend.js"
import { runMultiLockConformance } from "./conformance/multiLock.js"

runMultiLockConformance("memory", MemoryBackend.layer)
