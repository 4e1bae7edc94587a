/**
 * The Redis backend's two connections: one for commands and one shared subscriber, whatever the
 * number of locks and waiters. Opened with the options the failure behaviour depends on, watched
 * (connection errors are logged once per run), and closed with the scope.
 *
 * On a Redis Cluster both are ioredis `Cluster`s (options in `clientOptions.ts`): the command one routes each
 * script to its slot's master, the subscriber one holds at most one sharded-subscriber connection
 * per master. Everything below works on either; what differs is said where it differs.
 *
 * The command budget: every call gets `commandTimeout` from the moment it is made, in total. While
 * the command connection is (re)connecting, a call waits for it inside that budget instead of
 * failing at once, so a blip shorter than the budget (a restart, a dropped connection) costs a
 * delay, not a `LockBackendError`. It is then sent exactly once: never queued for later, never
 * resent.
 */
import type { Scope } from "effect"
import { Effect, FiberSet, Redacted } from "effect"
import type { Cluster, Redis, RedisOptions } from "ioredis"
import type { BackendOperation, LockBackendError } from "../../LockError.js"
import type { ClusterConfig } from "./clientOptions.js"
import {
  clusterCommandOptions,
  clusterSubscriberOptions,
  isCluster,
  isSentinel,
  ownOptions,
  subscriberOptions,
  withSentinelDefaults
} from "./clientOptions.js"
import { backendName, describeConnectionError, redisError } from "./errors.js"
import { clusterReadyCheckRefused } from "./permissions.js"
import { makeWriteBatcher } from "./writeBatch.js"

export type ConnectionName = "command" | "subscriber"

/** A standalone connection or a cluster client: the backend speaks to either. */
export type Client = Redis | Cluster

type Listener = Parameters<Redis["on"]>[1]

export interface ConnectOptions {
  readonly url?: string | Redacted.Redacted<string> | undefined
  readonly redis?: RedisOptions | undefined
  readonly cluster?: ClusterConfig | undefined
  readonly client?: Client | undefined
  /** Whole milliseconds, at least 1. */
  readonly commandTimeout: number
}

export interface Connections {
  /** `cluster` when the clients are ioredis `Cluster`s. */
  readonly mode: "standalone" | "cluster"
  readonly command: Client
  readonly subscriber: Client
  readonly commandTimeout: number
  /** Runs an effect in the backend's scope (log lines from ioredis' callbacks). */
  readonly runFork: <A, E>(effect: Effect.Effect<A, E>) => void
  /** Call right before each command written on the command connection: one write per turn. */
  readonly batch: () => void
  /** Connected, and nothing queued for the connection. */
  readonly clear: () => boolean
  /** Run `send` once the command connection is back (at once when it is), or `onClosed` if it never is. */
  readonly whenConnected: (send: () => void, onClosed: () => void) => void
  /** `effect` (which sends one command) within the command budget, waiting for a reconnect inside it. */
  readonly budgeted: <A>(
    effect: Effect.Effect<A, LockBackendError>,
    operation: BackendOperation,
    key: string
  ) => Effect.Effect<A, LockBackendError>
  /** `handlers` on `redis`'s events for the lifetime of the scope. */
  readonly listen: (
    redis: Client,
    handlers: Readonly<Record<string, Listener>>
  ) => Effect.Effect<void, never, Scope.Scope>
}

const listen = (redis: Client, handlers: Readonly<Record<string, Listener>>) =>
  Effect.acquireRelease(
    Effect.sync(() => {
      for (const [event, handler] of Object.entries(handlers)) redis.on(event, handler)
    }),
    () =>
      Effect.sync(() => {
        for (const [event, handler] of Object.entries(handlers)) redis.off(event, handler)
      })
  )

/**
 * Open (or adopt) the connections. An existing `client` is used for commands as it is and never
 * closed; the subscriber is always the backend's own (a `duplicate()`), closed with the scope
 * (`QUIT`, then a hard disconnect if that does not finish within the command timeout). ioredis is
 * imported only here, so that effect-lock loads without it.
 */
export const openConnections = (options: ConnectOptions): Effect.Effect<Connections, LockBackendError, Scope.Scope> =>
  Effect.gen(function*() {
    const { commandTimeout } = options
    const runFork = yield* FiberSet.makeRuntime<never>()
    const lastError: Record<ConnectionName, Error | undefined> = { command: undefined, subscriber: undefined }

    // Listeners stay on connections the backend owns (a late error event after the close must still
    // find a listener) and are removed from an external client when the scope closes.
    const watch = (redis: Client, connection: ConnectionName) => {
      const annotate = Effect.annotateLogs({ backend: backendName, connection })
      // A cluster client's errors name the node in their message; the endpoint says "cluster".
      const tlsOption = isCluster(redis) ? redis.options.redisOptions?.tls : redis.options.tls
      const endpoint = {
        host: isCluster(redis)
          ? "cluster"
          : isSentinel(redis.options)
          ? `sentinel master ${redis.options.name ?? "mymaster"}`
          : redis.options.path ?? redis.options.host ?? "localhost",
        port: isCluster(redis) || isSentinel(redis.options) ? 0 : redis.options.port ?? 6379,
        tls: tlsOption !== undefined && tlsOption !== null && (tlsOption as unknown) !== false
      }
      let neverReady = redis.status !== "ready"
      const onError = (raw: Error) => {
        // A TLS refusal says which server and which certificate, in the log and in the errors.
        const error = describeConnectionError(raw, endpoint, neverReady)
        // ioredis reports every failed reconnect attempt; the first of a run is worth a warning.
        const repeated = lastError[connection]?.message === error.message
        // While a connection has never been ready, a TLS refusal stays the error to report: the
        // errors that follow it ("Stream isn't writeable", ...) are its consequences.
        const keep = neverReady && lastError[connection]?.name === "TlsError" && error.name !== "TlsError"
        if (!keep) lastError[connection] = error
        const log = repeated ? Effect.logDebug : Effect.logWarning
        runFork(annotate(log(`Redis ${connection} connection error: ${error.message}`)))
      }
      const onReady = () => {
        neverReady = false
        if (lastError[connection] === undefined) return
        lastError[connection] = undefined
        runFork(annotate(Effect.logInfo(`Redis ${connection} connection re-established`)))
      }
      return { error: onError, ready: onReady }
    }

    // A finalizer runs uninterruptibly, where a timeout cannot stop a QUIT whose reply never comes
    // (an ioredis 6 cluster caught mid-migration): the wait for the reply is made interruptible.
    const close = (redis: Client) =>
      Effect.tryPromise(() => redis.quit()).pipe(
        Effect.interruptible,
        Effect.timeout(commandTimeout),
        Effect.ignore,
        Effect.ensuring(Effect.sync(() => redis.disconnect()))
      )

    const connect = (redis: Client, connection: ConnectionName) => {
      const connecting = Effect.tryPromise({
        try: () => redis.connect(),
        catch: (cause) => redisError("connect", undefined, lastError[connection] ?? cause)
      })
      // A cluster whose user may not run its ready check (CLUSTER INFO) would retry it for ever.
      return isCluster(redis)
        ? Effect.raceFirst(
          connecting,
          Effect.mapError(clusterReadyCheckRefused(redis), (cause) => redisError("connect", undefined, cause))
        )
        : connecting
    }

    const openOwned = (create: () => Client, connection: ConnectionName) =>
      Effect.gen(function*() {
        const redis = yield* Effect.acquireRelease(Effect.sync(create), close)
        for (const [event, handler] of Object.entries(watch(redis, connection))) redis.on(event, handler)
        yield* connect(redis, connection)
        return redis
      })

    let command: Client
    const external = options.client
    if (external !== undefined) {
      command = external
      yield* listen(command, watch(command, "command"))
      if (command.status === "wait") yield* connect(command, "command")
    } else {
      const ioredis = yield* Effect.tryPromise({
        try: () => import("ioredis"),
        catch: (cause) => redisError("connect", undefined, cause)
      })
      const cluster = options.cluster
      if (cluster !== undefined) {
        command = yield* openOwned(
          () => new ioredis.Cluster([...cluster.nodes], clusterCommandOptions(cluster.options, commandTimeout)),
          "command"
        )
      } else {
        const url = options.url === undefined
          ? undefined
          : typeof options.url === "string"
          ? options.url
          : Redacted.value(options.url)
        const commandOptions: RedisOptions = {
          connectionName: "effect-lock",
          ...withSentinelDefaults(options.redis),
          ...ownOptions(commandTimeout)
        }
        command = yield* openOwned(
          () => url === undefined ? new ioredis.Redis(commandOptions) : new ioredis.Redis(url, commandOptions),
          "command"
        )
      }
    }
    const clustered = isCluster(command)
    const subscriber = yield* openOwned(
      () =>
        isCluster(command)
          ? command.duplicate([], clusterSubscriberOptions(command.options, commandTimeout))
          : command.duplicate(subscriberOptions(commandTimeout)),
      "subscriber"
    )

    // --- the command budget ---------------------------------------------------------------------

    const connectionWaiters = new Set<(connected: boolean) => void>()
    const settleWaiters = (connected: boolean) => () => {
      for (const waiter of Array.from(connectionWaiters)) waiter(connected)
    }
    // "end": ioredis gave up reconnecting (its retryStrategy) or the connection was closed.
    const onCommandEnd = settleWaiters(false)
    yield* Effect.addFinalizer(() => Effect.sync(onCommandEnd))
    yield* listen(command, { ready: settleWaiters(true), end: onCommandEnd })

    // Connected, and nothing queued for the connection: calls queued while it was away (a
    // compensating release first of all) go out before any new one.
    const clear = () => command.status === "ready" && connectionWaiters.size === 0

    const whenConnected = (send: () => void, onClosed: () => void) => {
      if (clear()) return send()
      const waiter = (connected: boolean) => {
        connectionWaiters.delete(waiter)
        if (connected) send()
        else onClosed()
      }
      connectionWaiters.add(waiter)
    }

    const unreachable = (operation: BackendOperation, key: string, why: string) => {
      const last = lastError.command
      return redisError(
        operation,
        key,
        new Error(
          `Redis is not reachable: ${why}${last === undefined ? "" : ` (last connection error: ${last.message})`}`
        )
      )
    }

    const connected = (operation: BackendOperation, key: string): Effect.Effect<void, LockBackendError> =>
      Effect.async<void, LockBackendError>((resume) => {
        if (clear()) {
          resume(Effect.void)
          return
        }
        if (command.status === "end") {
          resume(Effect.fail(unreachable(operation, key, "the connection is closed")))
          return
        }
        const waiter = (ok: boolean) => {
          connectionWaiters.delete(waiter)
          resume(ok ? Effect.void : Effect.fail(unreachable(operation, key, "the connection is closed")))
        }
        connectionWaiters.add(waiter)
        return Effect.sync(() => {
          connectionWaiters.delete(waiter)
        })
      })

    // An external client may have no command timeout of its own; then the backend applies one. A
    // cluster client's node timeout restarts on each redirection, so the backend always applies one.
    const ownTimeout = !isCluster(command) && typeof command.options.commandTimeout === "number"

    // The budget must be able to stop a call even where the caller is uninterruptible (the lock
    // runs acquire attempts uninterruptibly), hence `interruptible`: an interrupted wait for the
    // connection has sent nothing, and an interrupted acquire in flight is compensated.
    const withinBudget = <A>(effect: Effect.Effect<A, LockBackendError>, onTimeout: () => LockBackendError) =>
      Effect.timeoutFail(Effect.interruptible(effect), { duration: commandTimeout, onTimeout })

    const budgeted = <A>(
      effect: Effect.Effect<A, LockBackendError>,
      operation: BackendOperation,
      key: string
    ): Effect.Effect<A, LockBackendError> =>
      Effect.suspend(() => {
        // The hot path: connected, and ioredis times the command out itself.
        if (clear()) {
          return ownTimeout
            ? effect
            : withinBudget(effect, () => redisError(operation, key, new Error("Command timed out")))
        }
        let sent = false
        return withinBudget(
          Effect.zipRight(
            connected(operation, key),
            Effect.suspend(() => {
              sent = true
              return effect
            })
          ),
          () =>
            sent
              ? redisError(operation, key, new Error("Command timed out"))
              : unreachable(operation, key, `no connection within the command timeout (${commandTimeout} ms)`)
        )
      })

    return {
      mode: clustered ? "cluster" : "standalone",
      command,
      subscriber,
      commandTimeout,
      runFork,
      // A cluster client writes to many sockets of its own; its commands go out unbatched.
      batch: isCluster(command) ? () => {} : makeWriteBatcher(command),
      clear,
      whenConnected,
      budgeted,
      listen
    }
  })
