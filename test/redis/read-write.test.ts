import { describe, it } from "@effect/vitest"
import { runReadWriteConformance } from "../conformance/readWrite.js"
import { skipRedis } from "../support/redisServer.js"
import { freshServerLayer } from "./helpers.js"

if (skipRedis()) {
  describe.skip("read-write lock conformance: redis", () => it("needs Redis", () => {}))
} else {
  runReadWriteConformance("redis", freshServerLayer())
}
