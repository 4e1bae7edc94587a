/**
 * The CLI's side of Redis: one connection opened from a URL that is never printed (errors name
 * the host and port only), the lock described in one script, lock-shaped keys found with SCAN,
 * and the forced unlock. ioredis is imported when a command first connects, so `--help` runs
 * without it.
 *
 * A Redis Cluster is detected (`INFO cluster` of the node the URL names): the CLI then opens an
 * ioredis `Cluster` from that node with the URL's credentials, runs each lock's script on its
 * slot's master, scans every master, and publishes a forced unlock with `SPUBLISH` on the lock's
 * shard, where sharded subscribers (effect-lock's and Redisson's) listen.
 */
import type { Scope } from "effect"
import { Effect, Redacted } from "effect"
import type { Cluster, Redis, RedisOptions } from "ioredis"
import { makeKeyLayout, prefixName, unlockMessage } from "../redis/keys.js"
import type { Script } from "../redis/scripts.js"
import { defineScript, runScript } from "../redis/scripts.js"
import { CliError, ExitCode } from "./errors.js"

/** What every command is told: where Redis is, and the prefix the library was configured with. */
export interface Target {
  readonly url: Redacted.Redacted<string>
  readonly prefix: string
}

export interface Connection {
  /** The server, or on a cluster the cluster client (each call routed to its key's master). */
  readonly redis: Redis | Cluster
  /** `host:port`, all an error may say about the URL. */
  readonly host: string
  readonly target: Target
  /** Whether the URL names a node of a Redis Cluster. */
  readonly cluster: boolean
  /** The server, or every master of the cluster (for SCAN and keyspace events). */
  readonly masters: () => ReadonlyArray<Redis>
}

export type LockKind = "lock" | "fair-lock" | "read-write-lock" | "none"

/** The `--json` shape of `inspect` and of every line of `list` (docs/cli.md). */
export interface LockDescription {
  readonly key: string
  readonly kind: LockKind
  readonly holders: ReadonlyArray<{ readonly owner: string; readonly count: number }>
  readonly ttlMillis: number | null
  readonly fencingToken: string | null
  readonly waiters: number
}

/** `host:port` of a URL, or a sentence when it does not parse (the URL itself is never echoed). */
const hostOf = (url: string): string | undefined => {
  try {
    const parsed = new URL(url)
    if (!/^rediss?:$/.test(parsed.protocol)) return undefined
    return `${parsed.hostname || "127.0.0.1"}:${parsed.port || "6379"}`
  } catch {
    return undefined
  }
}

/** An error's message with every credential of `url` taken out, in case a library echoed one. */
const scrub = (url: string, message: string): string => {
  let parsed: URL
  try {
    parsed = new URL(url)
  } catch {
    return message
  }
  let safe = message.split(url).join("<redis url>")
  for (const secret of [parsed.password, decodeURIComponent(parsed.password)]) {
    if (secret.length > 0) safe = safe.split(secret).join("<redacted>")
  }
  return safe.split("\n")[0] ?? safe
}

const messageOf = (error: unknown) => error instanceof Error ? error.message : String(error)

const isAuthError = (message: string) => /NOAUTH|WRONGPASS|invalid password|invalid username/i.test(message)

/** The error a failed command becomes: a reply error is the server's answer, anything else a lost connection. */
const commandError = (connection: Connection, error: unknown): CliError => {
  const url = Redacted.value(connection.target.url)
  const message = scrub(url, messageOf(error))
  if (isAuthError(message)) {
    return new CliError({
      message: `Redis at ${connection.host} refused the credentials: ${message}`,
      exitCode: ExitCode.unreachable
    })
  }
  if (error instanceof Error && error.name === "ReplyError") {
    // A cluster node taken for a single server: neither INFO nor CLUSTER INFO was allowed.
    const hint = /^(MOVED|ASK) /.test(message)
      ? " (a Redis Cluster node: the CLI recognizes one by INFO cluster or CLUSTER INFO, which this user may not run)"
      : ""
    return new CliError({
      message: `Redis at ${connection.host} answered: ${message}${hint}`,
      exitCode: ExitCode.failure
    })
  }
  return new CliError({ message: `lost Redis at ${connection.host}: ${message}`, exitCode: ExitCode.unreachable })
}

/**
 * Close a connection: `QUIT`, then a hard disconnect. A finalizer runs uninterruptibly, where a
 * timeout cannot stop a wait for a reply that never comes: that wait is made interruptible (as
 * the backend's connections close, connection.ts), so after a second the disconnect happens.
 */
const close = (redis: Redis | Cluster) =>
  Effect.tryPromise(() => redis.quit()).pipe(
    Effect.interruptible,
    Effect.timeout("1 second"),
    Effect.ignore,
    Effect.ensuring(Effect.sync(() => redis.disconnect()))
  )

/**
 * Whether the server says it is a cluster node: `INFO cluster` says `cluster_enabled:1`, or, for a
 * user who may not run `INFO`, `CLUSTER INFO` answers (a server without cluster support refuses
 * it). Not a cluster when neither can tell.
 */
const isClusterNode = (redis: Redis) =>
  Effect.tryPromise(() => redis.info("cluster")).pipe(
    Effect.map((info) => /^cluster_enabled:1\s*$/m.test(info)),
    Effect.orElse(() =>
      Effect.tryPromise(() => redis.call("CLUSTER", "INFO") as Promise<unknown>).pipe(
        Effect.map((info) => typeof info === "string" && info.includes("cluster_state:")),
        Effect.orElseSucceed(() => false)
      )
    )
  )

/** What a node connection of the cluster takes from the URL: credentials and TLS (a cluster has only db 0). */
const nodeOptionsOf = (url: string): RedisOptions => {
  const parsed = new URL(url)
  return {
    ...(parsed.username === "" ? {} : { username: decodeURIComponent(parsed.username) }),
    ...(parsed.password === "" ? {} : { password: decodeURIComponent(parsed.password) }),
    ...(parsed.protocol === "rediss:" ? { tls: {} } : {})
  }
}

const commonOptions = {
  connectionName: "effect-lock-cli",
  // No INFO on connecting (ioredis' ready check, which prints a warning where INFO is refused): a
  // server still loading its data answers LOADING, which the command reports.
  enableReadyCheck: false,
  maxRetriesPerRequest: 0,
  connectTimeout: 5_000,
  commandTimeout: 10_000
} as const

/**
 * Connect (and check with PING that the server accepts us), closed with the scope. One attempt:
 * an operator's tool should say at once that Redis is not there, not retry in silence. A node of a
 * Redis Cluster is recognized, and the cluster opened from it.
 */
export const connect = (target: Target): Effect.Effect<Connection, CliError, Scope.Scope> =>
  Effect.gen(function*() {
    const url = Redacted.value(target.url)
    const host = hostOf(url)
    if (host === undefined) {
      return yield* new CliError({
        message: "the Redis URL is not valid: expected redis://[[user]:password@]host[:port][/db] or rediss://...",
        exitCode: ExitCode.usage
      })
    }
    const ioredis = yield* Effect.tryPromise({
      try: () => import("ioredis"),
      catch: () =>
        new CliError({
          message: "effect-lock needs ioredis to reach Redis: npm install ioredis",
          exitCode: ExitCode.failure
        })
    })
    const redis = yield* Effect.acquireRelease(
      Effect.sync(() =>
        new ioredis.Redis(url, {
          ...commonOptions,
          lazyConnect: true,
          enableOfflineQueue: false,
          retryStrategy: () => null
        })
      ),
      close
    )
    // Without a listener ioredis prints "Unhandled error event" with the error; the reason is
    // reported by the failed call below instead.
    let lastError: unknown
    redis.on("error", (error: unknown) => (lastError = error))
    const unreachable = (error: unknown) => {
      const message = scrub(url, messageOf(lastError ?? error))
      return isAuthError(message)
        ? new CliError({
          message: `Redis at ${host} refused the credentials: ${message}`,
          exitCode: ExitCode.unreachable
        })
        : new CliError({ message: `cannot connect to Redis at ${host}: ${message}`, exitCode: ExitCode.unreachable })
    }
    yield* Effect.tryPromise({ try: () => redis.connect(), catch: unreachable })
    yield* Effect.tryPromise({ try: () => redis.ping(), catch: unreachable })
    if (!(yield* isClusterNode(redis))) {
      return { redis, host, target, cluster: false, masters: () => [redis] } satisfies Connection
    }
    const parsed = new URL(url)
    const cluster = yield* Effect.acquireRelease(
      Effect.sync(() =>
        new ioredis.Cluster([{ host: parsed.hostname || "127.0.0.1", port: Number(parsed.port || "6379") }], {
          lazyConnect: true,
          clusterRetryStrategy: () => null,
          slotsRefreshTimeout: 5_000,
          redisOptions: { ...nodeOptionsOf(url), ...commonOptions }
        })
      ),
      close
    )
    cluster.on("error", (error: unknown) => (lastError = error))
    yield* Effect.tryPromise({ try: () => cluster.connect(), catch: unreachable })
    return { redis: cluster, host, target, cluster: true, masters: () => cluster.nodes("master") } satisfies Connection
  })

/** Run a raw command (on a cluster, where ioredis routes it). */
export const call = <A>(connection: Connection, ...args: [string, ...Array<string | number>]) =>
  callOn<A>(connection, connection.redis, ...args)

/** Run a raw command on `redis`: the server, one master of the cluster, or the cluster client. */
export const callOn = <A>(
  connection: Connection,
  redis: Redis | Cluster,
  ...args: [string, ...Array<string | number>]
) =>
  Effect.tryPromise({
    try: () => redis.call(...args) as Promise<A>,
    catch: (error) => commandError(connection, error)
  })

const runCli = <I extends ReadonlyArray<unknown>, A>(connection: Connection, script: Script<I, A>, ...input: I) =>
  Effect.async<A, CliError>((resume) => {
    runScript(connection.redis, script, input, (reply) => {
      const decoded = script.decode(reply)
      resume(
        decoded === undefined
          ? Effect.fail(
            new CliError({
              message: `unexpected reply from ${script.name}.lua: ${JSON.stringify(reply)}`,
              exitCode: ExitCode.failure
            })
          )
          : Effect.succeed(decoded)
      )
    }, (error) => resume(Effect.fail(commandError(connection, error))))
  })

interface Snapshot {
  readonly type: string
  readonly pttl: number
  readonly token: string
  readonly queued: number
  readonly subscribers: number
  readonly fields: ReadonlyArray<readonly [string, string]>
}

const describeScript = defineScript({
  name: "describe",
  encode: (lock: string, token: string, queue: string, channel: string) => [[lock, token, queue, channel], []] as const,
  decode: (reply): Snapshot | undefined => {
    if (!Array.isArray(reply) || reply.length < 5) return undefined
    const [type, pttl, token, queued, subscribers] = reply as [unknown, unknown, unknown, unknown, unknown]
    if (
      typeof type !== "string" || typeof pttl !== "number" || typeof queued !== "number" ||
      typeof subscribers !== "number"
    ) return undefined
    const fields: Array<readonly [string, string]> = []
    for (let i = 5; i + 1 < reply.length; i += 2) fields.push([String(reply[i]), String(reply[i + 1])])
    return { type, pttl, token: String(token), queued, subscribers, fields }
  }
})

const forceUnlockScript = defineScript({
  name: "force-unlock",
  encode: (lock: string, channel: string, readWriteChannel: string, queue: string, publish: "publish" | "spublish") =>
    [[lock, channel, readWriteChannel, queue], [unlockMessage, publish]] as const,
  decode: (reply): { readonly status: -1 | 0 | 1; readonly detail: string | number } | undefined => {
    if (!Array.isArray(reply)) return undefined
    const [status, detail] = reply as [unknown, unknown]
    if ((status === 1 || status === 0) && typeof detail === "number") return { status, detail }
    if (status === -1 && typeof detail === "string") return { status, detail }
    return undefined
  }
})

/** Redis keys of the lock `name` (the name as the library is given it, without the prefix). */
const keysOf = (target: Target, name: string) => {
  const keys = makeKeyLayout(target.prefix).keysOf(name)
  return {
    ...keys,
    queue: prefixName("redisson_lock_queue", keys.lock),
    readWriteChannel: prefixName("redisson_rwlock", keys.lock)
  }
}

/** A hash is lock-shaped when each field is an owner (`<id>:<n>`) with a positive hold count, or a read-write lock's `mode`. */
const lockShaped = (fields: ReadonlyArray<readonly [string, string]>) =>
  fields.length > 0 &&
  fields.every(([field, value]) =>
    field === "mode" ? value === "read" || value === "write" : field.includes(":") && /^[1-9]\d*$/.test(value)
  )

export type Described =
  | { readonly _tag: "Lock"; readonly description: LockDescription; readonly lockShaped: boolean }
  | { readonly _tag: "NotALock"; readonly type: string }

/** Describe the lock `name`: holders, TTL, fencing token and waiters, read in one script. */
export const describe = (connection: Connection, name: string): Effect.Effect<Described, CliError> =>
  Effect.gen(function*() {
    const keys = keysOf(connection.target, name)
    const snapshot = yield* runCli(connection, describeScript, keys.lock, keys.token, keys.queue, keys.channel)
    if (snapshot.type !== "hash" && snapshot.type !== "none") return { _tag: "NotALock", type: snapshot.type }
    const mode = snapshot.fields.find(([field]) => field === "mode")
    const kind: LockKind = mode !== undefined
      ? "read-write-lock"
      : snapshot.queued > 0
      ? "fair-lock"
      : snapshot.type === "none"
      ? "none"
      : "lock"
    const holders = snapshot.fields
      .filter(([field]) => field !== "mode")
      .map(([owner, count]) => ({ owner, count: Number(count) }))
    const waiters = snapshot.subscribers + snapshot.queued
    return {
      _tag: "Lock",
      lockShaped: snapshot.type === "hash" && lockShaped(snapshot.fields),
      description: {
        key: name,
        kind,
        holders,
        ttlMillis: snapshot.type === "none" || snapshot.pttl < 0 ? null : snapshot.pttl,
        fencingToken: snapshot.token === "" ? null : snapshot.token,
        waiters
      }
    }
  })

const globEscape = (text: string) => text.replace(/[*?[\]\\]/g, (c) => `\\${c}`)

/** Every lock-shaped key matching `pattern` (a Redis glob over names without the prefix), sorted by name. */
export const list = (connection: Connection, pattern: string): Effect.Effect<Array<LockDescription>, CliError> =>
  Effect.gen(function*() {
    const { prefix } = connection.target
    const match = globEscape(prefix) + pattern
    const names = new Set<string>()
    // On a cluster each master holds its own slots' keys: every one is scanned.
    for (const master of connection.masters()) {
      let cursor = "0"
      do {
        const [next, keys] = yield* callOn<[string, Array<string>]>(
          connection,
          master,
          "SCAN",
          cursor,
          "MATCH",
          match,
          "COUNT",
          1000,
          "TYPE",
          "hash"
        )
        cursor = next
        for (const key of keys) if (key.startsWith(prefix)) names.add(key.slice(prefix.length))
      } while (cursor !== "0")
    }
    const found: Array<LockDescription> = []
    for (const name of [...names].sort()) {
      const described = yield* describe(connection, name)
      if (described._tag === "Lock" && described.lockShaped) found.push(described.description)
    }
    return found
  })

export type Unlocked =
  | { readonly _tag: "Unlocked"; readonly receivers: number }
  | { readonly _tag: "NotLocked" }
  | { readonly _tag: "NotALock"; readonly type: string }

/**
 * Delete the lock whoever holds it and publish the release, so its waiters try at once: with
 * `SPUBLISH` on a cluster (the channels share the lock's slot, so the script runs on its master).
 */
export const forceUnlock = (connection: Connection, name: string): Effect.Effect<Unlocked, CliError> =>
  Effect.gen(function*() {
    const keys = keysOf(connection.target, name)
    const result = yield* runCli(
      connection,
      forceUnlockScript,
      keys.lock,
      keys.channel,
      keys.readWriteChannel,
      keys.queue,
      connection.cluster ? "spublish" : "publish"
    )
    if (result.status === 1) return { _tag: "Unlocked", receivers: Number(result.detail) }
    if (result.status === 0) return { _tag: "NotLocked" }
    return { _tag: "NotALock", type: String(result.detail) }
  })

/** The Redis key of the lock `name`, and its release channel (for `watch`). */
export const redisKeysOf = keysOf
