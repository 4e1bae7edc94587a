import { describe, it } from "@effect/vitest"
import { runSemaphoreConformance } from "../conformance/semaphore.js"
import { skipRedis } from "../support/redisServer.js"
import { freshServerLayer } from "./helpers.js"

if (skipRedis()) {
  describe.skip("semaphore conformance: redis", () => it("needs Redis", () => {}))
} else {
  runSemaphoreConformance("redis", freshServerLayer())
  runSemaphoreConformance("redis, prefixed", freshServerLayer({ prefix: "app:" }))
}
