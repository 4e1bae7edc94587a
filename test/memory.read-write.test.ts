import * as MemoryBackend from "../src/MemoryBackend.js"
import { runReadWriteConformance } from "./conformance/readWrite.js"

runReadWriteConformance("memory", MemoryBackend.layer)
