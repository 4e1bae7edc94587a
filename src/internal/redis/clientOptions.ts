/**
 * The ioredis options the backend's failure behaviour depends on, for standalone connections and
 * for cluster clients. The backend applies them over the user's own options.
 */
import type { Cluster, ClusterNode, ClusterOptions, Redis, RedisOptions } from "ioredis"

/** A cluster to connect to: startup nodes and ioredis `ClusterOptions`. */
export interface ClusterConfig {
  readonly nodes: ReadonlyArray<ClusterNode>
  readonly options?: ClusterOptions | undefined
}

/** Whether `client` is an ioredis `Cluster` (ioredis marks both kinds with `isCluster`). */
export const isCluster = (client: Redis | Cluster): client is Cluster => client.isCluster

/**
 * The user's options with ioredis' `failoverDetector` on when they name sentinels and do not set
 * it. The detector subscribes to the sentinels' `+switch-master` and reconnects to the new master
 * at once; without it, ioredis kept writing to the demoted master for about 10 s after a
 * `SENTINEL FAILOVER` here (issue #13), and those acknowledged writes were lost.
 */
export const withSentinelDefaults = (redis: RedisOptions | undefined): RedisOptions | undefined =>
  redis?.sentinels === undefined || redis.sentinels === null || redis.failoverDetector !== undefined
    ? redis
    : { ...redis, failoverDetector: true }

/** Whether ioredis `options` reach the master through Sentinel. */
export const isSentinel = (options: RedisOptions | undefined): boolean =>
  Array.isArray(options?.sentinels) && options.sentinels.length > 0

export const ownOptions = (commandTimeout: number): RedisOptions => ({
  lazyConnect: true,
  // Off: with auto-pipelining every call waits for the next tick and goes out as a pipeline of its
  // own, which cost about 100 µs per serial acquire + release here and bought no throughput on
  // distinct keys (docs/benchmarks.md). A plain write is sent at once.
  enableAutoPipelining: false,
  // An acquire must never sit in a queue while disconnected and run minutes later: commands fail
  // at once when there is no connection, in-flight ones fail when it drops, and none is resent.
  enableOfflineQueue: false,
  autoResendUnfulfilledCommands: false,
  maxRetriesPerRequest: 0,
  commandTimeout
})

export const subscriberOptions = (commandTimeout: number): RedisOptions => ({
  ...ownOptions(commandTimeout),
  // The backend resubscribes from its own wait queues after a reconnect.
  autoResubscribe: false
})

/**
 * How often a cluster client re-reads the slot map when nothing else makes it (ms). ioredis 5
 * leaves this off by default; then a sharded subscription whose master was failed over is never
 * restored. One second bounds how long waiters on a failed-over shard go without notifications.
 */
export const DEFAULT_SLOTS_REFRESH_MILLIS = 1_000

/**
 * The command cluster: the standalone rules for each node's connection, and for the cluster
 * itself no offline queue and no silent resend of a command whose connection closed
 * (`retryDelayOnFailover: 0`: an acquire may have run on the node that went away, so it fails and
 * is compensated, as on a standalone Redis). Redirections (`MOVED`, `ASK`, `TRYAGAIN`,
 * `CLUSTERDOWN`) are still followed: the node did not run the command.
 */
export const clusterCommandOptions = (options: ClusterOptions | undefined, commandTimeout: number): ClusterOptions => ({
  ...options,
  slotsRefreshInterval: options?.slotsRefreshInterval ?? DEFAULT_SLOTS_REFRESH_MILLIS,
  redisOptions: { connectionName: "effect-lock", ...options?.redisOptions, ...ownOptions(commandTimeout) },
  lazyConnect: true,
  enableOfflineQueue: false,
  enableAutoPipelining: false,
  retryDelayOnFailover: 0
})

/**
 * The subscriber cluster, duplicated from the command cluster (the user's or the backend's):
 * sharded subscribers (one connection per master, opened while it has channels), which ioredis
 * restores after a failover or a slot migration when it refreshes the slot map, hence a refresh
 * interval even when the user's cluster has none.
 */
export const clusterSubscriberOptions = (options: ClusterOptions, commandTimeout: number): ClusterOptions => ({
  ...clusterCommandOptions(options, commandTimeout),
  shardedSubscribers: true,
  redisOptions: { connectionName: "effect-lock", ...options.redisOptions, ...subscriberOptions(commandTimeout) }
})

/**
 * Open the connection to every replica of a cluster client that ioredis has not opened yet. The
 * backend calls it on the command cluster it owns, once connected and after each slot-map refresh.
 *
 * ioredis (5 and 6) opens a cluster node's connection on the node's first command, and with the
 * offline queue off it fails every other command sent to that node while it connects ("Connection
 * is closed."). Commands go to masters only, so a replica's connection stays unopened until a
 * failover promotes it; then every call that met `MOVED` at the switch failed so, a
 * `LockBackendError` (9 to 22 `withLock` calls per failover in test/cluster/failover.test.ts under
 * load). Only replicas: ioredis' ready check after a reconnect asks a random master, and must not
 * find its connection opening.
 */
export const connectReplicas = (cluster: Cluster) => (): void => {
  for (const node of cluster.nodes("slave")) {
    if (node.status === "wait") node.connect().catch(() => {})
  }
}
