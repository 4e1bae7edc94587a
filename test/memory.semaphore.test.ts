import * as MemoryBackend from "../src/MemoryBackend.js"
import { runSemaphoreConformance } from "./conformance/semaphore.js"

runSemaphoreConformance("memory", MemoryBackend.layer)
