/**
 * The conformance suites of every lock kind, on a backend that reaches its master through Redis
 * Sentinel with replica sync on (every lock write followed by `WAIT 1`): a real master, replica
 * and three sentinels started for this file and stopped however it ends.
 */
import { afterAll, beforeAll, describe } from "@effect/vitest"
import { Effect, Exit, Layer, Scope } from "effect"
import * as RedisBackend from "../../src/RedisBackend.js"
import { runFairConformance } from "../conformance/fair.js"
import { runMultiLockConformance } from "../conformance/multiLock.js"
import { runReadWriteConformance } from "../conformance/readWrite.js"
import { runSemaphoreConformance } from "../conformance/semaphore.js"
import { runConformance } from "../conformance/suite.js"
import { skipRedis } from "../support/redisServer.js"
import type { SentinelGroup } from "../support/sentinel.js"
import { sentinelGroup } from "../support/sentinel.js"

const skip = skipRedis(true)

describe.skipIf(skip)("conformance through Sentinel with replica sync", () => {
  let group: SentinelGroup | undefined
  const scope = Effect.runSync(Scope.make())
  beforeAll(async () => {
    group = await Effect.runPromise(Scope.extend(sentinelGroup(), scope))
    await group.ready()
  }, 90_000)
  afterAll(() => Effect.runPromise(Scope.close(scope, Exit.void)))
  // Built by each suite after the group has started (a file's beforeAll runs first).
  const backend = Layer.unwrapEffect(Effect.sync(() => {
    if (group === undefined) throw new Error("the Sentinel group did not start")
    return RedisBackend.layer({
      redis: { sentinels: [...group.sentinels], name: group.name },
      // Generous: a loaded machine can keep the replica's acknowledgement waiting.
      replicas: { sync: 1, timeout: "1 second" }
    })
  }))
  runConformance("redis sentinel, replica sync", backend)
  runSemaphoreConformance("redis sentinel, replica sync", backend)
  runMultiLockConformance("redis sentinel, replica sync", backend)
  runFairConformance("redis sentinel, replica sync", backend)
  runReadWriteConformance("redis sentinel, replica sync", backend)
})
