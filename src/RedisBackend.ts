/**
 * The Redis backend, on ioredis, in Redisson's RLock layout: the lock is a hash at the key whose
 * field `<owner>` holds the hold count, with a `PEXPIRE` lease; a release publishes `0` on
 * `redisson_lock__channel:{<key>}`; the fencing counter is `redisson_lock_token:{<key>}`. Java
 * services on Redisson and TypeScript services on effect-lock therefore exclude each other on the
 * same lock name. See `docs/redis.md`.
 *
 * Each backend uses exactly two connections, whatever the number of locks and waiters: one for
 * commands and one shared subscriber. On a Redis Cluster (`cluster` options, or an ioredis
 * `Cluster` as `client`) these are two cluster clients: commands go to each lock's master, and
 * notifications use sharded pub/sub (`SSUBSCRIBE`/`SPUBLISH`) as Redisson does in cluster mode,
 * with at most one subscriber connection per master. See `docs/cluster.md`.
 *
 * @since 0.1.0
 */
import type { Redacted, Scope } from "effect"
import { Config, Duration, Effect, Layer, Option } from "effect"
import type { ConfigError } from "effect/ConfigError"
import type { Cluster, ClusterNode, ClusterOptions, Redis, RedisOptions } from "ioredis"
import { FAIR_WAIT_WINDOW_MILLIS } from "./internal/memory/fair.js"
import * as acl from "./internal/redis/acl.js"
import { connectReplicas, isCluster } from "./internal/redis/clientOptions.js"
import type { Undo } from "./internal/redis/commands.js"
import { makeCommands } from "./internal/redis/commands.js"
import * as config from "./internal/redis/config.js"
import { openConnections } from "./internal/redis/connection.js"
import { backendName, messageOf, redisError } from "./internal/redis/errors.js"
import { makeRedisFair } from "./internal/redis/fair.js"
import * as fairScripts from "./internal/redis/fairScripts.js"
import type { RedisKeys } from "./internal/redis/keys.js"
import { makeKeyLayout } from "./internal/redis/keys.js"
import * as scripts from "./internal/redis/lockScripts.js"
import { verifyPermissions } from "./internal/redis/permissions.js"
import { makeRedisReadWrite } from "./internal/redis/readWrite.js"
import * as readWriteScripts from "./internal/redis/readWriteScripts.js"
import { renewBySlot } from "./internal/redis/renewBySlot.js"
import type { ReplicaSync } from "./internal/redis/replicaSync.js"
import { makeCommandSync } from "./internal/redis/replicaSync.js"
import { loadScripts } from "./internal/redis/scripts.js"
import { makeRedisSemaphores } from "./internal/redis/semaphore.js"
import * as semaphoreScripts from "./internal/redis/semaphoreScripts.js"
import { hashSlot } from "./internal/redis/slot.js"
import { makeSubscriptions } from "./internal/redis/subscriptions.js"
import type { LockBackendShape, LockPrimitives, LockRequest, ReleaseResult } from "./LockBackend.js"
import { LockBackend } from "./LockBackend.js"
import type { LockBackendError } from "./LockError.js"
import { LockOptionsError } from "./LockError.js"

/**
 * How to reach Redis.
 *
 * Give a `url` (`redis://` or `rediss://` for TLS, optionally with credentials) and/or ioredis
 * `redis` options, or `cluster` nodes and options for a Redis Cluster, or an existing ioredis
 * `client` (a `Redis` or a `Cluster`). The backend opens its own connections from a URL or options
 * and closes them with its scope; an existing client is used for commands as it is and never
 * closed (the subscriber connection is a `duplicate()` of it, which is closed).
 *
 * @since 0.1.0
 * @category models
 */
export interface RedisBackendOptions {
  /** A Redis URL. Pass it as `Redacted` when it carries a password. */
  readonly url?: string | Redacted.Redacted<string> | undefined
  /**
   * ioredis options (TLS, username/password, db, `retryStrategy`, ...). The backend overrides the
   * ones its failure behaviour depends on: `enableOfflineQueue: false`,
   * `autoResendUnfulfilledCommands: false`, `maxRetriesPerRequest: 0`, `commandTimeout`,
   * `enableAutoPipelining: false` and `lazyConnect: true`.
   *
   * Redis Sentinel is ioredis' own configuration: `{ sentinels: [{ host, port }], name: "mymaster" }`
   * (with `sentinelPassword`, `sentinelTLS`, `role`, ... as ioredis takes them; a `url` next to it
   * gives the master's credentials and database, not its address). The backend turns ioredis'
   * `failoverDetector` on unless it is set: without it, ioredis kept writing to a demoted master
   * for about 10 s after a failover (docs/sentinel.md).
   */
  readonly redis?: RedisOptions | undefined
  /**
   * A Redis Cluster: startup `nodes` (`{ host, port }` or `"host:port"`) and ioredis
   * `ClusterOptions` (TLS, credentials in `redisOptions`, `natMap`, ...). The backend overrides
   * the options its failure behaviour depends on (as for `redis`, per node and for the cluster:
   * no offline queue, `retryDelayOnFailover: 0`), sets `slotsRefreshInterval` to 1 second unless
   * given, and subscribes with sharded subscribers. Needs Redis 7 or later (`SPUBLISH`).
   */
  readonly cluster?: RedisClusterConfig | undefined
  /**
   * An existing ioredis client to run commands on: a `Redis`, or a `Cluster` for a Redis Cluster.
   * It is not closed by the backend. The backend sends a command only while the client is
   * connected (waiting for it within `commandTimeout`), so the client's offline queue never holds
   * one of the backend's commands. A `Cluster` should have `enableOfflineQueue: false` and a
   * `slotsRefreshInterval`; the backend's subscriber (a `duplicate()` with sharded subscribers) gets
   * both whatever the client has.
   */
  readonly client?: Redis | Cluster | undefined
  /** Prepended to every lock name, e.g. `"myapp:"`. Default: none. */
  readonly prefix?: string | undefined
  /**
   * The budget of every call, from the moment it is made: waiting for a reconnect (when the
   * connection is down) and the round trip together. A whole number of milliseconds, at least 1,
   * finite; anything else is a `LockOptionsError`. Default: 2 seconds.
   */
  readonly commandTimeout?: Duration.DurationInput | undefined
  /**
   * Replica sync (Redisson's `checkLockSyncedSlaves`): every acquire, renew, release and
   * force-release of every lock kind is followed, on the same connection and in the same write,
   * by `WAIT sync timeout`. An acquisition that no replica confirmed is released at once and fails
   * with a `LockBackendError` whose `cause` is a `LockReplicaSyncError`; a write that fewer than
   * `sync` replicas confirmed is logged and counted (`effect_lock_replica_sync_short_total`).
   * `aof: true` asks `WAITAOF 0 sync timeout` instead (replicas fsynced their AOF; Redis 7.2+,
   * untested here), falling back to `WAIT` when the server refuses it. Releases notify instead of
   * handing over (a hand-over is an acquisition nobody would confirm). Not on a Redis Cluster.
   * See docs/sentinel.md for what this does and does not guarantee. Default: off.
   */
  readonly replicas?: ReplicaSyncOptions | undefined
}

/**
 * Replica sync: `sync` replicas (a whole number, at least 1) asked to confirm each lock write
 * within `timeout` (whole milliseconds, at least 1, below `commandTimeout`).
 *
 * @since 0.3.0
 * @category models
 */
export interface ReplicaSyncOptions {
  readonly sync: number
  readonly timeout: Duration.DurationInput
  /** `WAITAOF` (Redis 7.2+) rather than `WAIT`. Default: false. */
  readonly aof?: boolean | undefined
}

/**
 * Where a Redis Cluster is: a few of its nodes (ioredis discovers the rest) and ioredis
 * `ClusterOptions`.
 *
 * @since 0.2.0
 * @category models
 */
export interface RedisClusterConfig {
  readonly nodes: ReadonlyArray<ClusterNode>
  readonly options?: ClusterOptions | undefined
}

const defaultCommandTimeout = Duration.seconds(2)

const validateTarget = (options: RedisBackendOptions): Effect.Effect<void, LockOptionsError> => {
  const given = (["url", "cluster", "client"] as const).filter((field) => options[field] !== undefined)
  if (given.length > 1) {
    return Effect.fail(
      new LockOptionsError({ field: given.join(" and "), reason: "are different targets: give only one of them" })
    )
  }
  if (options.cluster !== undefined) {
    const nodes: unknown = options.cluster.nodes
    if (!Array.isArray(nodes) || nodes.length === 0) {
      return Effect.fail(
        new LockOptionsError({ field: "cluster.nodes", reason: "must list at least one node, e.g. [{ host, port }]" })
      )
    }
  }
  return Effect.void
}

const validateCommandTimeout = (input: Duration.DurationInput | undefined): Effect.Effect<number, LockOptionsError> => {
  const fail = (reason: string) => Effect.fail(new LockOptionsError({ field: "commandTimeout", reason }))
  const decoded = Duration.decodeUnknown(input ?? defaultCommandTimeout)
  if (Option.isNone(decoded)) return fail(`is not a duration: ${String(input)}`)
  const millis = Duration.toMillis(decoded.value)
  if (!Number.isFinite(millis) || millis < 1) return fail(`must be finite and at least 1 ms, got ${String(input)}`)
  if (!Number.isInteger(millis)) return fail(`must be a whole number of milliseconds, got ${millis} ms`)
  return Effect.succeed(millis)
}

const validateReplicas = (
  options: RedisBackendOptions,
  commandTimeout: number
): Effect.Effect<ReplicaSync | undefined, LockOptionsError> => {
  const replicas = options.replicas
  if (replicas === undefined) return Effect.succeed(undefined)
  const fail = (field: string, reason: string) =>
    Effect.fail(new LockOptionsError({ field: `replicas${field === "" ? "" : `.${field}`}`, reason }))
  if (typeof replicas !== "object" || replicas === null) {
    return fail("", `must be { sync, timeout }, got ${String(replicas)}`)
  }
  if (options.cluster !== undefined || (options.client !== undefined && options.client.isCluster)) {
    return fail("", "is not supported on a Redis Cluster (WAIT must follow each script on its master's connection)")
  }
  const sync: unknown = replicas.sync
  if (typeof sync !== "number" || !Number.isInteger(sync) || sync < 1 || sync > 1_000) {
    return fail("sync", `must be a whole number of replicas from 1 to 1000, got ${String(sync)}`)
  }
  const decoded = Duration.decodeUnknown(replicas.timeout)
  if (Option.isNone(decoded)) return fail("timeout", `is not a duration: ${String(replicas.timeout)}`)
  const millis = Duration.toMillis(decoded.value)
  if (!Number.isFinite(millis) || !Number.isInteger(millis) || millis < 1) {
    return fail("timeout", `must be a whole number of milliseconds, at least 1, got ${String(replicas.timeout)}`)
  }
  if (millis >= commandTimeout) {
    return fail("timeout", `${millis} ms must be below the command timeout (${commandTimeout} ms)`)
  }
  const aof: unknown = replicas.aof
  if (aof !== undefined && typeof aof !== "boolean") return fail("aof", `must be true or false, got ${String(aof)}`)
  return Effect.succeed({ replicas: sync, timeoutMillis: millis, aof: aof === true })
}

/**
 * The Redis primitives over the backend's two connections. Reads nothing but the options; every
 * call is one script round trip.
 */
const makePrimitives = (options: RedisBackendOptions, commandTimeout: number, replicaSync: ReplicaSync | undefined) =>
  Effect.gen(function*() {
    const connections = yield* openConnections({
      url: options.url,
      redis: options.redis,
      cluster: options.cluster,
      client: options.client,
      commandTimeout
    })
    const layout = makeKeyLayout(options.prefix ?? "", connections.mode === "cluster" ? "sharded" : "plain")
    const command = connections.command
    // On a cluster the backend opened: replicas' connections open before a failover needs them.
    if (options.client === undefined && isCluster(command)) {
      const connect = connectReplicas(command)
      yield* connections.listen(command, { refresh: connect })
      connect()
    }
    const allScripts = [...scripts.all, ...semaphoreScripts.all, ...fairScripts.all, ...readWriteScripts.all]
    yield* Effect.tryPromise({
      // On a cluster every master gets the scripts (a replica promoted later answers NOSCRIPT once,
      // and the script is sent in full).
      try: () =>
        isCluster(command)
          ? Promise.all(command.nodes("master").map((node) => loadScripts(node, allScripts))).then(() => {})
          : loadScripts(command, allScripts),
      catch: (cause) => redisError("load-scripts", undefined, cause)
    })
    // The ACL check asks the server; on a cluster every master (each node has its own users).
    const replicas = replicaSync === undefined ? undefined : replicaSync.aof ? "aof" as const : "wait" as const
    if (isCluster(command)) {
      const nodeOptions = command.options.redisOptions ?? {}
      const habits = {
        readyCheck: nodeOptions.enableReadyCheck !== false,
        connectionName: (nodeOptions.connectionName ?? "") !== "",
        cluster: { readyCheck: command.options.enableReadyCheck !== false },
        replicas
      }
      yield* Effect.forEach(
        command.nodes("master"),
        (node) =>
          verifyPermissions(
            node,
            options.prefix ?? "",
            habits,
            `${node.options.host ?? ""}:${node.options.port ?? ""}`
          ),
        { concurrency: "unbounded", discard: true }
      )
    } else {
      yield* verifyPermissions(command, options.prefix ?? "", {
        readyCheck: command.options.enableReadyCheck !== false,
        connectionName: (command.options.connectionName ?? "") !== "",
        replicas
      })
    }
    const commands = makeCommands(
      connections,
      layout,
      replicaSync === undefined || isCluster(command) ? undefined : makeCommandSync(connections, command, replicaSync)
    )
    const { call, callTaking, callTakingWith } = commands
    const subscriptions = yield* makeSubscriptions(connections, layout)

    // A server that refuses the hand-over script (an ACL user without `pubsub|numsub`, a Redis
    // older than 5.0) still gets plain releases: hand-overs stop for this backend, once, with a warning.
    let handOverRefused = false
    // Only refusals of the script itself; any other error (OOM, BUSY, ...) is a failed release.
    const refusedByServer = (error: LockBackendError) =>
      error.cause instanceof Error && error.cause.name === "ReplyError" &&
      /NOPERM|can't run this command|unknown command|non deterministic/i.test(error.cause.message)

    const release = (key: string, owner: string): Effect.Effect<ReleaseResult, LockBackendError> =>
      call("release", key, scripts.release, layout.keysOf(key), owner)

    const handOver = (key: string, from: string, to: LockRequest) => {
      // Under replica sync the receiver acquires on its own, confirmed like any acquisition.
      if (handOverRefused || replicaSync !== undefined) return release(key, from)
      const keys = layout.keysOf(key)
      // Our own subscriber among the channel's: any other one is a client elsewhere that waits.
      const own = subscriptions.isLive(keys.channel) ? 1 : 0
      return callTaking("release", to, (result) => result._tag === "HandedOver", scripts.handOver, keys, from, to, own)
        .pipe(
          Effect.catchIf(refusedByServer, (error) => {
            handOverRefused = true
            return Effect.logWarning(
              "Redis refused the hand-over script; releases notify waiters instead of handing the lock over"
            ).pipe(
              Effect.annotateLogs({ backend: backendName, error: messageOf(error.cause) }),
              Effect.zipRight(release(key, from))
            )
          })
        )
    }

    // One script for several locks: any keys on one server; on a cluster, only keys of one slot.
    const tryAcquireAll = (requests: ReadonlyArray<LockRequest>) => {
      const first = requests[0]
      if (first === undefined) return undefined
      const keys = requests.map((request) => layout.keysOf(request.key))
      if (layout.pubsub === "sharded") {
        const slot = hashSlot(layout.keysOf(first.key).lock)
        if (keys.some((k) => hashSlot(k.lock) !== slot)) return undefined
      }
      const owners = requests.map((request) => request.owner)
      const undo: Undo<[ReadonlyArray<RedisKeys>, ReadonlyArray<string>]> = {
        script: scripts.releaseAll,
        input: [keys, owners]
      }
      return callTakingWith(
        undo,
        "acquire",
        first,
        (result) => result._tag === "Acquired",
        scripts.acquireAll,
        keys,
        requests
      )
    }

    const renewOnce = (requests: ReadonlyArray<LockRequest>) =>
      call("renew", requests[0]?.key ?? "", scripts.renew, requests.map((r) => layout.keysOf(r.key).lock), requests)

    const primitives: LockPrimitives = {
      name: backendName,
      checkKey: layout.problemOf,
      tryAcquire: (request) =>
        callTaking(
          "acquire",
          request,
          (result) => result._tag === "Acquired",
          scripts.acquire,
          layout.keysOf(request.key),
          request
        ),
      tryAcquireAll,
      renew: (requests) =>
        requests.length === 0
          ? Effect.succeed([])
          : layout.pubsub === "sharded"
          ? renewBySlot(requests, (request) => hashSlot(layout.keysOf(request.key).lock), renewOnce)
          : renewOnce(requests),
      release,
      handOver,
      forceRelease: (key) => call("force-release", key, scripts.forceRelease, layout.keysOf(key)),
      inspect: (key) =>
        Effect.map(
          call("inspect", key, scripts.inspect, layout.keysOf(key).lock),
          Option.map((info) => ({ key, ...info }))
        ),
      subscribe: subscriptions.subscribe,
      unsubscribe: subscriptions.unsubscribe,
      notifications: subscriptions.notifications,
      semaphore: makeRedisSemaphores(commands, layout),
      kinds: {
        fair: yield* makeRedisFair(connections, commands, layout, options.prefix ?? "", FAIR_WAIT_WINDOW_MILLIS),
        ...(yield* makeRedisReadWrite(connections, commands, layout, options.prefix ?? "", FAIR_WAIT_WINDOW_MILLIS))
      }
    }
    return primitives
  })

/**
 * Builds a Redis backend: checks the options, connects the command and subscriber connections,
 * loads the scripts (`SCRIPT LOAD`) and closes the connections it opened when the scope closes
 * (`QUIT`, then a hard disconnect if that does not finish within the command timeout). Fails with
 * `LockOptionsError` for bad options and `LockBackendError` when Redis cannot be reached or
 * refuses the scripts.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (
  options: RedisBackendOptions = {}
): Effect.Effect<LockBackendShape, LockBackendError | LockOptionsError, Scope.Scope> =>
  Effect.zipRight(
    validateTarget(options),
    Effect.flatMap(
      validateCommandTimeout(options.commandTimeout),
      (commandTimeout) =>
        Effect.flatMap(
          validateReplicas(options, commandTimeout),
          (replicaSync) => Effect.flatMap(makePrimitives(options, commandTimeout, replicaSync), LockBackend.make)
        )
    )
  )

/**
 * A layer providing a Redis `LockBackend`. The connections live as long as the layer.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { withLock } from "effect-lock"
 * import { RedisBackend } from "effect-lock/RedisBackend"
 *
 * const program = withLock("orders:42", Effect.log("alone"))
 * program.pipe(Effect.provide(RedisBackend.layer({ url: "redis://127.0.0.1:6379", prefix: "shop:" })))
 * ```
 *
 * @since 0.1.0
 * @category layers
 */
export const layer = (
  options: RedisBackendOptions = {}
): Layer.Layer<LockBackend, LockBackendError | LockOptionsError> => Layer.scoped(LockBackend, make(options))

/**
 * Options of `layerConfig`: those of `layer` without the target, which comes from `Config`, plus
 * the ioredis `ClusterOptions` to use when the target is a cluster.
 *
 * @since 0.2.0
 * @category models
 */
export interface RedisBackendConfigOptions extends Omit<RedisBackendOptions, "url" | "client" | "cluster"> {
  /** ioredis `ClusterOptions` (credentials in `redisOptions`, TLS, ...) when `REDIS_CLUSTER_NODES` is set. */
  readonly clusterOptions?: ClusterOptions | undefined
}

/**
 * Like `layer`, with the target read from `Config` (by default the environment): a Redis Cluster
 * when `REDIS_CLUSTER_NODES` is set (`host:port` startup nodes separated by commas, e.g.
 * `10.0.0.1:7000,10.0.0.2:7000`; credentials go in `clusterOptions.redisOptions`); else a master
 * found through Redis Sentinel when `REDIS_SENTINELS` is set (`host:port` sentinels separated by
 * commas, with `REDIS_SENTINEL_NAME`, the master's name, required then; `REDIS_URL`, optional
 * then, gives the master's credentials and database; the sentinels' own password goes in
 * `redis.sentinelPassword`); otherwise the `REDIS_URL`. The URL is read as `Redacted` so that a
 * password in it never reaches a log.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { withLock } from "effect-lock"
 * import { RedisBackend } from "effect-lock/RedisBackend"
 *
 * // REDIS_SENTINELS=10.0.0.1:26379,10.0.0.2:26379,10.0.0.3:26379 REDIS_SENTINEL_NAME=mymaster
 * const program = withLock("orders:42", Effect.log("alone"))
 * program.pipe(Effect.provide(RedisBackend.layerConfig({ replicas: { sync: 1, timeout: "50 millis" } })))
 * ```
 *
 * @since 0.1.0
 * @category layers
 */
export const layerConfig = (
  options: RedisBackendConfigOptions = {}
): Layer.Layer<LockBackend, LockBackendError | LockOptionsError | ConfigError> =>
  Layer.unwrapEffect(Effect.gen(function*() {
    const { clusterOptions, ...rest } = options
    const nodes = yield* config.clusterNodes
    if (Option.isSome(nodes)) return layer({ ...rest, cluster: { nodes: nodes.value, options: clusterOptions } })
    const sentinel = yield* config.sentinelTarget
    if (Option.isSome(sentinel)) {
      const redis: RedisOptions = {
        ...rest.redis,
        sentinels: sentinel.value.sentinels.map(({ host, port }) => ({ host, port })),
        name: sentinel.value.name
      }
      const url = yield* Config.option(config.redisUrl)
      return layer(Option.isSome(url) ? { ...rest, redis, url: url.value } : { ...rest, redis })
    }
    return layer({ ...rest, url: yield* config.redisUrl })
  }))

/**
 * The least-privilege ACL rule for a backend with `prefix`, one ACL token per entry: the commands
 * the connections and the scripts run, the key patterns of the locks and their companion keys
 * (the fencing counter `redisson_lock_token:...` and the channel name, which the scripts take as a
 * key), and the channel patterns of the release notifications. Give it to `ACL SETUSER` after
 * `reset on >password`. The backend checks at startup (Redis 7.0+) that its user has every part
 * of it and otherwise fails with a `LockBackendError` naming what is missing. With `replicas: true`
 * the rule also grants `WAIT`, which replica sync needs, and with `replicas: "aof"` `WAITAOF` too
 * (Redis 7.2+: older servers refuse the rule); the startup check asks about them when replica sync
 * is on. With `cluster: true` it is the rule for a Redis Cluster (create the user on every node):
 * sharded pub/sub (`SSUBSCRIBE`, `SUNSUBSCRIBE`, `SPUBLISH`, `PUBSUB SHARDNUMSUB`) instead of the
 * plain one, and what ioredis' cluster client runs (`CLUSTER SLOTS`, `CLUSTER INFO`, `READONLY`);
 * the startup check then asks every master. See docs/redis.md.
 *
 * @example
 * ```ts
 * import { RedisBackend } from "effect-lock/RedisBackend"
 *
 * const rule = RedisBackend.aclRule({ prefix: "locks:" })
 * // ACL SETUSER effect-lock reset on >password <rule...>
 * console.log(["ACL", "SETUSER", "effect-lock", "reset", "on", ">password", ...rule].join(" "))
 * ```
 *
 * @since 0.2.0
 * @category acl
 */
export const aclRule = (
  options: {
    readonly prefix?: string | undefined
    readonly replicas?: boolean | "aof" | undefined
    readonly cluster?: boolean | undefined
  } = {}
): ReadonlyArray<string> => {
  const rule = acl.aclRule(options.prefix ?? "", { cluster: options.cluster })
  if (options.replicas === "aof") return [...rule, "+wait", "+waitaof"]
  return options.replicas === true ? [...rule, "+wait"] : rule
}

/**
 * This module as a namespace, so that both `import { RedisBackend } from "effect-lock/RedisBackend"`
 * and `import * as RedisBackend from "effect-lock/RedisBackend"` read `RedisBackend.layer(...)`.
 *
 * @since 0.2.0
 */
export * as RedisBackend from "./RedisBackend.js"
