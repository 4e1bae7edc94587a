import { describe, it } from "@effect/vitest"
import { runConformance } from "../conformance/suite.js"
import { skipRedis } from "../support/redisServer.js"
import { freshServerLayer } from "./helpers.js"

if (skipRedis()) {
  describe.skip("conformance: redis", () => it("needs Redis", () => {}))
} else {
  runConformance("redis", freshServerLayer())
}
