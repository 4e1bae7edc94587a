import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { createHash } from "node:crypto"
import { readFileSync } from "node:fs"
import { MultiLock } from "../../src/index.js"
import * as RedisBackend from "../../src/RedisBackend.js"
import { runMultiLockConformance } from "../conformance/multiLock.js"
import { redisServer, skipRedis } from "../support/redisServer.js"
import { admin, freshServerLayer } from "./helpers.js"

const shaOf = (name: string) =>
  createHash("sha1").update(readFileSync(new URL(`../../lua/${name}.lua`, import.meta.url), "utf8")).digest("hex")

if (skipRedis()) {
  describe.skip("multi-lock conformance: redis", () => it("needs Redis", () => {}))
} else {
  runMultiLockConformance("redis", freshServerLayer())

  describe("multi-lock on one Redis server", () => {
    it.scopedLive(
      "an uncontended multi-lock is one acquire-all.lua round trip, whatever its keys",
      () =>
        Effect.gen(function*() {
          const server = yield* redisServer()
          const monitor = yield* admin(server.url)
          const scripts: Array<string> = []
          const feed = yield* Effect.acquireRelease(
            Effect.promise(() => monitor.monitor()),
            (feed) => Effect.sync(() => feed.disconnect())
          )
          feed.on("monitor", (_time: string, args: Array<string>) => {
            if (args[0]?.toLowerCase() === "evalsha" && args[1] !== undefined) scripts.push(args[1])
          })
          const keys = ["orders:1", "accounts:7", "{x}:y", "z"]
          yield* MultiLock.withLocks(keys, Effect.void).pipe(
            Effect.provide(Layer.fresh(RedisBackend.layer({ url: server.url })))
          )
          // MONITOR shows a command once it ran; the release of the last key went out last.
          yield* Effect.sleep("200 millis")
          const acquireAll = scripts.filter((sha) => sha === shaOf("acquire-all")).length
          const acquire = scripts.filter((sha) => sha === shaOf("acquire")).length
          const releases = scripts.filter((sha) => sha === shaOf("release")).length
          assert.deepStrictEqual({ acquireAll, acquire, releases }, { acquireAll: 1, acquire: 0, releases: 4 })
        }),
      60_000
    )
  })
}
