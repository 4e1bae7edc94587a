/**
 * Shared pieces of the cluster tests: a backend layer on a cluster of its own, and a cluster-aware
 * admin client.
 */
import type { Scope } from "effect"
import { Effect, Layer } from "effect"
import { Cluster } from "ioredis"
import type { RedisBackendOptions } from "../../src/RedisBackend.js"
import * as RedisBackend from "../../src/RedisBackend.js"
import type { RedisCluster } from "../support/redisCluster.js"
import { clusterAvailable, redisCluster } from "../support/redisCluster.js"

/**
 * Call once at the top of every cluster test file: `true` when redis-server or redis-cli is
 * missing (said loudly); under `CI=true` that fails the run instead.
 */
export const skipCluster = (): boolean => {
  if (clusterAvailable()) return false
  const why = "redis-server and redis-cli are needed to start a Redis Cluster"
  if (process.env.CI === "true") throw new Error(`Cluster tests cannot run under CI=true: ${why}`)
  console.warn(`\n${"!".repeat(78)}\n!!! SKIPPING CLUSTER TESTS: ${why}\n${"!".repeat(78)}\n`)
  return true
}

/** A Redis backend on a 3-master, 3-replica cluster of its own, both living as long as the layer. */
export const freshClusterLayer = (options: Omit<RedisBackendOptions, "url" | "client" | "cluster"> = {}) =>
  Layer.unwrapScoped(
    Effect.map(redisCluster(), (cluster) => RedisBackend.layer({ ...options, cluster: { nodes: cluster.nodes } }))
  )

/** A backend layer on `cluster`. */
export const clusterBackend = (
  cluster: RedisCluster,
  options: Omit<RedisBackendOptions, "url" | "client" | "cluster"> = {}
) => RedisBackend.layer({ ...options, cluster: { nodes: cluster.nodes } })

/** A plain ioredis Cluster for looking at the data from outside; closed with the scope. */
export const clusterAdmin = (cluster: RedisCluster): Effect.Effect<Cluster, never, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.promise(async () => {
      const client = new Cluster([...cluster.nodes], {
        redisOptions: { connectionName: "test-admin", maxRetriesPerRequest: 1 },
        slotsRefreshInterval: 500,
        shardedSubscribers: true
      })
      client.on("error", () => {})
      await new Promise<void>((resolve, reject) => {
        client.once("ready", () => resolve())
        client.once("end", () => reject(new Error("admin cluster client ended")))
      })
      return client
    }),
    (client) => Effect.sync(() => client.disconnect())
  )
