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
 * resent. Where ioredis does not time the command itself (a cluster, an external client without
 * `commandTimeout`), the budget is a deadline in one queue per connection served by one timer,
 * not a fiber per call.
 */
import type { Scope } from "effect"
import { Effect, Either, FiberSet, Redacted } from "effect"
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
import { makeDeadlines } from "./deadlines.js"
import { backendName, describeConnectionError, redisError } from "./errors.js"
import { clusterReadyCheckRefused } from "./permissions.js"
import { makeClusterWriteBatcher, makeWriteBatcher } from "./writeBatch.js"

export type ConnectionName = "command" | "subscriber"

/** A standalone connection or a cluster client: the backend speaks to either. */
export type Client = Redis | Cluster

type Listener = Parameters<Redis["on"]>[1]

/** A command's outcome. */
export type Outcome<A> = Either.Either<A, LockBackendError>

/** Writes one command and reports its outcome to `settle`; returns what to do if it is abandoned. */
export type Send<A> = (settle: (result: Outcome<A>) => void) => (() => void) | void

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
  /**
   * One command, sent by `send`, within the command budget, waiting for a reconnect inside it. `send`
   * writes the command and calls `settle` with its outcome (calls after the first, or after the
   * budget ran out, are ignored); it may return `abandon`, called if the caller stops waiting while
   * the command is in flight (the budget ran out, or the caller was interrupted).
   */
  readonly budgeted: <A>(
    operation: BackendOperation,
    key: string,
    send: Send<A>
  ) => Effect.Effect<A, LockBackendError>
  /**
   * `budgeted` by callbacks: `done` gets the outcome, once, unless the call is stopped first. The
   * return value (absent when there is nothing to stop) stops waiting, as an interrupted caller of
   * `budgeted` does.
   */
  readonly start: <A>(
    operation: BackendOperation,
    key: string,
    send: Send<A>,
    done: (result: Outcome<A>) => void
  ) => (() => void) | undefined
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

    // Calls waiting for the connection, and compensations (`whenConnected`), which go out first.
    const connectionWaiters = new Set<(connected: boolean) => void>()
    const priorityWaiters = new Set<(connected: boolean) => void>()
    const settleWaiters = (connected: boolean) => () => {
      for (const waiter of Array.from(priorityWaiters)) waiter(connected)
      for (const waiter of Array.from(connectionWaiters)) waiter(connected)
    }
    // "end": ioredis gave up reconnecting (its retryStrategy) or the connection was closed.
    const onCommandEnd = settleWaiters(false)
    yield* listen(command, { ready: settleWaiters(true), end: onCommandEnd })

    // Connected, and nothing queued for the connection: calls queued while it was away (a
    // compensating release first of all) go out before any new one.
    const clear = () => command.status === "ready" && connectionWaiters.size === 0 && priorityWaiters.size === 0

    const whenConnected = (send: () => void, onClosed: () => void) => {
      if (clear()) return send()
      const waiter = (connected: boolean) => {
        priorityWaiters.delete(waiter)
        if (connected) send()
        else onClosed()
      }
      priorityWaiters.add(waiter)
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

    const deadlines = makeDeadlines(commandTimeout)
    yield* Effect.addFinalizer(() =>
      Effect.sync(() => {
        onCommandEnd()
        deadlines.close()
      })
    )

    // An external client may have no command timeout of its own; then the backend applies one. A
    // cluster client's node timeout restarts on each redirection, so the backend always applies one.
    const ownTimeout = !isCluster(command) && typeof command.options.commandTimeout === "number"

    // The hot path: connected, and ioredis times the command out itself.
    const direct = <A>(send: Send<A>, done: (result: Outcome<A>) => void): (() => void) | undefined => {
      let finished = false
      const abandon = send((result) => {
        if (finished) return
        finished = true
        done(result)
      })
      if (typeof abandon !== "function") return undefined
      return () => {
        if (finished) return
        finished = true
        abandon()
      }
    }

    // Every other call carries its own deadline (`makeDeadlines`: one timer shared by all calls, no
    // fiber per call). The deadline fails the call without interrupting anyone, so it stops a call
    // even where the caller is uninterruptible (the lock runs acquire attempts uninterruptibly),
    // and such a caller, interrupted meanwhile, still gets the call's outcome. An interruptible
    // caller stops waiting when interrupted: a wait for the connection has sent nothing then, and
    // an acquire in flight is compensated (`abandon`), as when the deadline passes.
    const withDeadline = <A>(
      operation: BackendOperation,
      key: string,
      send: Send<A>,
      done: (result: Outcome<A>) => void
    ): () => void => {
      let finished = false
      let sent = false
      let abandon: (() => void) | void = undefined
      let waiter: ((connected: boolean) => void) | undefined
      const deadline = deadlines.add(() => {
        if (finished) return
        finished = true
        if (waiter !== undefined) connectionWaiters.delete(waiter)
        if (sent && typeof abandon === "function") abandon()
        done(Either.left(
          sent
            ? redisError(operation, key, new Error("Command timed out"))
            : unreachable(operation, key, `no connection within the command timeout (${commandTimeout} ms)`)
        ))
      })
      const settle = (result: Outcome<A>) => {
        if (finished) return
        finished = true
        deadlines.cancel(deadline)
        done(result)
      }
      const go = () => {
        sent = true
        abandon = send(settle)
      }
      if (clear()) go()
      else if (command.status === "end") settle(Either.left(unreachable(operation, key, "the connection is closed")))
      else {
        const onConnection = (connected: boolean) => {
          connectionWaiters.delete(onConnection)
          waiter = undefined
          if (finished) return
          if (connected) go()
          else settle(Either.left(unreachable(operation, key, "the connection is closed")))
        }
        waiter = onConnection
        connectionWaiters.add(onConnection)
      }
      return () => {
        if (finished) return
        finished = true
        deadlines.cancel(deadline)
        if (waiter !== undefined) connectionWaiters.delete(waiter)
        if (sent && typeof abandon === "function") abandon()
      }
    }

    const start = <A>(
      operation: BackendOperation,
      key: string,
      send: Send<A>,
      done: (result: Outcome<A>) => void
    ): (() => void) | undefined => ownTimeout && clear() ? direct(send, done) : withDeadline(operation, key, send, done)

    const budgeted = <A>(operation: BackendOperation, key: string, send: Send<A>): Effect.Effect<A, LockBackendError> =>
      Effect.async<A, LockBackendError>((resume) => {
        const stop = start(operation, key, send, resume)
        if (stop !== undefined) return Effect.sync(stop)
      })

    return {
      mode: clustered ? "cluster" : "standalone",
      command,
      subscriber,
      commandTimeout,
      runFork,
      batch: isCluster(command) ? makeClusterWriteBatcher(command) : makeWriteBatcher(command),
      clear,
      whenConnected,
      start,
      budgeted,
      listen
    }
  })
