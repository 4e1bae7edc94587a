import { describe, it } from "@effect/vitest"
import { runConformance } from "../conformance/suite.js"
import { skipRedis } from "../support/redisServer.js"
import { freshNodesLayer } from "./helpers.js"

if (skipRedis(true)) {
  describe.skip("conformance: redlock", () => it("needs redis-server", () => {}))
} else {
  runConformance("redlock (3 nodes)", freshNodesLayer(3))
}
