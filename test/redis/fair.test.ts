import { describe, it } from "@effect/vitest"
import { runFairConformance } from "../conformance/fair.js"
import { skipRedis } from "../support/redisServer.js"
import { freshServerLayer } from "./helpers.js"

if (skipRedis()) {
  describe.skip("fair lock conformance: redis", () => it("needs Redis", () => {}))
} else {
  runFairConformance("redis", freshServerLayer())
}
