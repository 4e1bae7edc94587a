import * as MemoryBackend from "../src/MemoryBackend.js"
import { runConformance } from "./conformance/suite.js"

runConformance("memory", MemoryBackend.layer)
