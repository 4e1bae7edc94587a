import * as MemoryBackend from "../src/MemoryBackend.js"
import { runFairConformance } from "./conformance/fair.js"

runFairConformance("memory", MemoryBackend.layer)
