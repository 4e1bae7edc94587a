import { describe, it } from "@effect/vitest"
import { runMultiLockConformance } from "../conformance/multiLock.js"
import { skipRedis } from "../support/redisServer.js"
import { freshServerLayer } from "./helpers.js"

if (skipRedis()) {
  describe.skip("multi-lock conformance: redis", () => it("needs Redis", () => {}))
} else {
  runMultiLockConformance("redis", freshServerLayer())
}
