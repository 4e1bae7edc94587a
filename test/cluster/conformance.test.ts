/**
 * The conformance suites of every lock kind the Redis backend has, on one real Redis Cluster
 * (3 masters, 3 replicas) started for this file and stopped however it ends.
 */
import { afterAll, beforeAll, describe, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { runFairConformance } from "../conformance/fair.js"
import { runMultiLockConformance } from "../conformance/multiLock.js"
import { runReadWriteConformance } from "../conformance/readWrite.js"
import { runSemaphoreConformance } from "../conformance/semaphore.js"
import { runConformance } from "../conformance/suite.js"
import type { RedisCluster } from "../support/redisCluster.js"
import { startRedisCluster } from "../support/redisCluster.js"
import { clusterBackend, skipCluster } from "./helpers.js"

if (skipCluster()) {
  describe.skip("conformance: redis cluster", () => it("needs redis-server and redis-cli", () => {}))
} else {
  let cluster: RedisCluster | undefined
  beforeAll(async () => {
    cluster = await startRedisCluster()
  }, 60_000)
  afterAll(() => cluster?.stop())
  // Built by each suite after the cluster has started (a file's beforeAll runs first).
  const backend = Layer.unwrapEffect(Effect.sync(() => {
    if (cluster === undefined) throw new Error("the cluster did not start")
    return clusterBackend(cluster)
  }))
  runConformance("redis cluster", backend)
  runSemaphoreConformance("redis cluster", backend)
  runMultiLockConformance("redis cluster", backend, { together: false })
  runFairConformance("redis cluster", backend)
  runReadWriteConformance("redis cluster", backend)
}
