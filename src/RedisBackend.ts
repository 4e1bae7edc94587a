/**
 * The Redis backend, on ioredis, in Redisson's RLock layout: the lock is a hash at the key whose
 * field `<owner>` holds the hold count, with a `PEXPIRE` lease; a release publishes `0` on
 * `redisson_lock__channel:{<key>}`; the fencing counter is `redisson_lock_token:{<key>}`. Java
 * services on Redisson and TypeScript services on effect-lock therefore exclude each other on the
 * same lock name. See `docs/redis.md`.
 *
 * Each backend uses exactly two connections, whatever the number of locks and waiters: one for
 * commands and one shared subscriber.
 *
 * @since 0.1.0
 */
import type { Scope } from "effect"
import { Config, Duration, Effect, FiberSet, Layer, Option, Redacted } from "effect"
import type { ConfigError } from "effect/ConfigError"
import type { Redis, RedisOptions } from "ioredis"
import type { AcquireResult, LockBackendShape, LockInfo, LockRequest, RenewResult } from "./LockBackend.js"
import { LockBackend } from "./LockBackend.js"
import { LockBackendError } from "./LockError.js"
import type { HandOverResult } from "./internal/handOver.js"
import { releaseHandingOver } from "./internal/handOver.js"
import { makeKeyLayout, unlockMessage } from "./internal/redisKeys.js"
import { loadScripts, readScripts, runScript, type Script } from "./internal/redisScripts.js"
import { makeWriteBatcher } from "./internal/writeBatch.js"
import { makeWaiterQueue } from "./internal/waiterQueue.js"

/**
 * How to reach Redis.
 *
 * Give a `url` (`redis://` or `rediss://` for TLS, optionally with credentials) and/or ioredis
 * `redis` options, or an existing ioredis `client`. The backend opens its own connections from a
 * URL or options and closes them with its scope; an existing client is used for commands as it is
 * and never closed (the subscriber connection is a `duplicate()` of it, which is closed).
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
   */
  readonly redis?: RedisOptions | undefined
  /**
   * An existing ioredis client to run commands on. It is not closed by the backend. The backend
   * sends a command only while the client is connected (waiting for it within `commandTimeout`),
   * so the client's offline queue never holds one of the backend's commands.
   */
  readonly client?: Redis | undefined
  /** Prepended to every lock name, e.g. `"myapp:"`. Default: none. */
  readonly prefix?: string | undefined
  /**
   * The budget of every call, from the moment it is made: waiting for a reconnect (when the
   * connection is down) and the round trip together. Finite, at least 1 ms. Default: 2 seconds.
   */
  readonly commandTimeout?: Duration.DurationInput | undefined
}

const backend = "redis"

const defaultCommandTimeout = Duration.seconds(2)

type Connection = "command" | "subscriber"

// ioredis attaches the failed command to its errors, arguments included: for AUTH and HELLO those
// are the credentials, which must not travel on in an error that may be logged or serialised.
const redactCredentials = (cause: unknown): unknown => {
  if (!(cause instanceof Error) || !("command" in cause)) return cause
  const command = cause.command as { readonly name?: unknown } | undefined
  if (typeof command?.name !== "string" || !/^(auth|hello)$/i.test(command.name)) return cause
  const redacted = new Error(cause.message)
  redacted.name = cause.name
  return Object.assign(redacted, { command: { name: command.name, args: ["<redacted>"] } })
}

const fail = (operation: string, key: string | undefined, cause: unknown) => {
  const safe = redactCredentials(cause)
  return new LockBackendError(
    key === undefined ? { backend, operation, cause: safe } : { backend, operation, key, cause: safe }
  )
}

// Errors after which the command certainly did not run: it was never written (no connection and
// no offline queue), or the server answered it (a script error).
const certainlyNotRun = (error: unknown): boolean =>
  error instanceof Error &&
  (error.name === "ReplyError" ||
    error.message.startsWith("Stream isn't writeable"))

const decodeAcquire = (reply: unknown): AcquireResult | undefined => {
  if (!Array.isArray(reply)) return undefined
  const [status, value] = reply as [unknown, unknown]
  if (status === 1 && typeof value === "string" && /^\d+$/.test(value)) {
    return { _tag: "Acquired", fencingToken: BigInt(value) }
  }
  if (status === 0 && typeof value === "number") {
    return { _tag: "Busy", ttlMillis: value < 0 ? undefined : value }
  }
  return undefined
}

const renewed: RenewResult = { _tag: "Renewed" }
const stolen: RenewResult = { _tag: "Lost", reason: "stolen" }
const expired: RenewResult = { _tag: "Lost", reason: "expired" }

const decodeRenew = (reply: unknown): RenewResult | undefined =>
  reply === 1 ? renewed : reply === 0 ? stolen : reply === -1 ? expired : undefined

const decodeRelease = (reply: unknown): boolean | undefined =>
  reply === 1 || reply === 0 ? true : reply === -1 ? false : undefined

const decodeHandOver = (reply: unknown): HandOverResult | undefined => {
  if (!Array.isArray(reply)) return undefined
  const [status, token] = reply as [unknown, unknown]
  if (status === 2 && typeof token === "string" && /^\d+$/.test(token)) {
    return { _tag: "HandedOver", fencingToken: BigInt(token) }
  }
  return status === 1
    ? { _tag: "Released" }
    : status === 0
    ? { _tag: "StillHeld" }
    : status === -1
    ? { _tag: "NotHeld" }
    : undefined
}

const decodeForceRelease = (reply: unknown): boolean | undefined =>
  reply === 1 ? true : reply === 0 ? false : undefined

const decodeInspect = (key: string) => (reply: unknown): Option.Option<LockInfo> | undefined => {
  if (reply === null) return Option.none()
  if (!Array.isArray(reply) || typeof reply[0] !== "number") return undefined
  const holders: Array<{ owner: string; holdCount: number }> = []
  for (let i = 1; i + 1 < reply.length; i += 2) {
    holders.push({ owner: String(reply[i]), holdCount: Number(reply[i + 1]) })
  }
  return Option.some({ key, holders, ttlMillis: reply[0] < 0 ? undefined : reply[0] })
}

/** `handlers` on `redis`'s events for the lifetime of the scope. */
const listen = (redis: Redis, handlers: Readonly<Record<string, Parameters<Redis["on"]>[1]>>) =>
  Effect.acquireRelease(
    Effect.sync(() => {
      for (const [event, handler] of Object.entries(handlers)) redis.on(event, handler)
    }),
    () =>
      Effect.sync(() => {
        for (const [event, handler] of Object.entries(handlers)) redis.off(event, handler)
      })
  )

const ownOptions = (commandTimeout: number): RedisOptions => ({
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

const subscriberOptions = (commandTimeout: number): RedisOptions => ({
  lazyConnect: true,
  enableAutoPipelining: false,
  enableOfflineQueue: false,
  autoResendUnfulfilledCommands: false,
  maxRetriesPerRequest: 0,
  // The backend resubscribes from its own wait queues after a reconnect.
  autoResubscribe: false,
  commandTimeout
})

/**
 * Builds a Redis backend. Reads the scripts in `lua/`, connects the command and subscriber
 * connections, loads the scripts (`SCRIPT LOAD`) and closes the connections it opened when the
 * scope closes (`QUIT`, then a hard disconnect if that does not finish within the command
 * timeout). Fails with `LockBackendError` when Redis cannot be reached or refuses the scripts.
 *
 * `ioredis` is imported only when the backend is built, so that effect-lock loads without it.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (
  options: RedisBackendOptions = {}
): Effect.Effect<LockBackendShape, LockBackendError, Scope.Scope> =>
  Effect.gen(function*() {
    const commandTimeout = yield* Option.match(
      Option.map(Duration.decodeUnknown(options.commandTimeout ?? defaultCommandTimeout), Duration.toMillis),
      {
        onNone: () => Effect.fail(fail("configure", undefined, new Error("commandTimeout is not a duration"))),
        onSome: (millis) =>
          Number.isFinite(millis) && millis >= 1
            ? Effect.succeed(Math.round(millis))
            : Effect.fail(fail("configure", undefined, new Error("commandTimeout must be at least 1 ms and finite")))
      }
    )
    const layout = makeKeyLayout(options.prefix ?? "")
    const runFork = yield* FiberSet.makeRuntime<never>()
    const scripts = yield* Effect.tryPromise({
      try: readScripts,
      catch: (cause) => fail("read-scripts", undefined, cause)
    })

    // --- connections ----------------------------------------------------------------------------

    const lastError: Record<Connection, Error | undefined> = { command: undefined, subscriber: undefined }
    // Listeners stay on connections the backend owns (a late error event after the close must still
    // find a listener) and are removed from an external client when the scope closes.
    const watch = (redis: Redis, connection: Connection, detach: boolean) => {
      const onError = (error: Error) => {
        // ioredis reports every failed reconnect attempt; the first of a run is worth a warning.
        const repeated = lastError[connection]?.message === error.message
        lastError[connection] = error
        const log = repeated ? Effect.logDebug : Effect.logWarning
        runFork(log(`Redis ${connection} connection error: ${error.message}`).pipe(
          Effect.annotateLogs({ backend, connection })
        ))
      }
      const onReady = () => {
        if (lastError[connection] === undefined) return
        lastError[connection] = undefined
        runFork(Effect.logInfo(`Redis ${connection} connection re-established`).pipe(
          Effect.annotateLogs({ backend, connection })
        ))
      }
      redis.on("error", onError)
      redis.on("ready", onReady)
      return detach
        ? Effect.addFinalizer(() =>
          Effect.sync(() => {
            redis.off("error", onError)
            redis.off("ready", onReady)
          })
        )
        : Effect.void
    }

    const close = (redis: Redis) =>
      Effect.tryPromise(() => redis.quit()).pipe(
        Effect.timeout(commandTimeout),
        Effect.ignore,
        Effect.ensuring(Effect.sync(() => redis.disconnect()))
      )

    const connect = (redis: Redis, connection: Connection) =>
      Effect.tryPromise({
        try: () => redis.connect(),
        catch: (cause) => fail(`connect (${connection})`, undefined, lastError[connection] ?? cause)
      })

    const openOwned = (create: () => Redis, connection: Connection) =>
      Effect.gen(function*() {
        const redis = yield* Effect.acquireRelease(Effect.sync(create), close)
        yield* watch(redis, connection, false)
        yield* connect(redis, connection)
        return redis
      })

    let command: Redis
    let subscriber: Redis
    const external = options.client
    if (external !== undefined) {
      command = external
      yield* watch(command, "command", true)
      if (command.status === "wait") yield* connect(command, "command")
      subscriber = yield* openOwned(() => external.duplicate(subscriberOptions(commandTimeout)), "subscriber")
    } else {
      const { Redis } = yield* Effect.tryPromise({
        try: () => import("ioredis"),
        catch: (cause) => fail("load ioredis", undefined, cause)
      })
      const url = options.url === undefined
        ? undefined
        : typeof options.url === "string"
        ? options.url
        : Redacted.value(options.url)
      const commandOptions: RedisOptions = {
        connectionName: "effect-lock",
        ...options.redis,
        ...ownOptions(commandTimeout)
      }
      command = yield* openOwned(
        () => url === undefined ? new Redis(commandOptions) : new Redis(url, commandOptions),
        "command"
      )
      subscriber = yield* openOwned(() => command.duplicate(subscriberOptions(commandTimeout)), "subscriber")
    }

    yield* Effect.tryPromise({
      try: () => loadScripts(command, scripts),
      catch: (cause) => fail("load-scripts", undefined, cause)
    })

    const batch = makeWriteBatcher(command)
    /** Run a script on the command connection, its write batched with the others of this turn. */
    const runCommandScript = (
      script: Script,
      keys: ReadonlyArray<string>,
      args: ReadonlyArray<string>,
      onReply: (reply: unknown) => void,
      onError: (error: unknown) => void
    ) => {
      batch()
      runScript(command, script, keys, args, onReply, onError)
    }

    // --- the command budget -------------------------------------------------------------------------
    //
    // Every call gets `commandTimeout` from the moment it is made, in total. While the command
    // connection is (re)connecting, the call waits for it inside that budget instead of failing at
    // once, so a blip shorter than the budget (a restart, a dropped connection) costs a delay, not a
    // `LockBackendError`. It is then sent exactly once: never queued for later, never resent.

    const connectionWaiters = new Set<(connected: boolean) => void>()
    const settleWaiters = (connected: boolean) => () => {
      for (const waiter of Array.from(connectionWaiters)) waiter(connected)
    }
    const onCommandReady = settleWaiters(true)
    // "end": ioredis gave up reconnecting (its retryStrategy) or the connection was closed.
    const onCommandEnd = settleWaiters(false)
    yield* Effect.addFinalizer(() => Effect.sync(onCommandEnd))
    yield* listen(command, { ready: onCommandReady, end: onCommandEnd })

    // Connected, and nothing queued for the connection: calls queued while it was away (a
    // compensating release first of all) go out before any new one.
    const clear = () => command.status === "ready" && connectionWaiters.size === 0

    const unreachable = (operation: string, key: string, why: string) => {
      const last = lastError.command
      return fail(
        operation,
        key,
        new Error(`Redis is not reachable: ${why}${last === undefined ? "" : ` (last connection error: ${last.message})`}`)
      )
    }

    const connected = (operation: string, key: string): Effect.Effect<void, LockBackendError> =>
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

    // An external client may have no command timeout of its own; then the backend applies one.
    const ownTimeout = typeof command.options.commandTimeout === "number"

    // The budget must be able to stop a call even where the caller is uninterruptible (the policy
    // runs acquire attempts uninterruptibly), hence `interruptible`: an interrupted wait for the
    // connection has sent nothing, and an interrupted acquire in flight is compensated.
    const withinBudget = <A>(
      effect: Effect.Effect<A, LockBackendError>,
      onTimeout: () => LockBackendError
    ): Effect.Effect<A, LockBackendError> =>
      Effect.timeoutFail(Effect.interruptible(effect), { duration: commandTimeout, onTimeout })

    const budgeted = <A>(
      effect: Effect.Effect<A, LockBackendError>,
      operation: string,
      key: string
    ): Effect.Effect<A, LockBackendError> =>
      Effect.suspend(() => {
        // The hot path: connected, and ioredis times the command out itself.
        if (clear()) {
          return ownTimeout
            ? effect
            : withinBudget(effect, () => fail(operation, key, new Error("Command timed out")))
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
              ? fail(operation, key, new Error("Command timed out"))
              : unreachable(operation, key, `no connection within the command timeout (${commandTimeout} ms)`)
        )
      })

    // --- scripts ----------------------------------------------------------------------------------

    const unexpected = (operation: string, key: string, reply: unknown) =>
      fail(operation, key, new Error(`unexpected reply ${JSON.stringify(reply)}`))

    const call = <A>(
      operation: string,
      key: string,
      script: Script,
      keys: ReadonlyArray<string>,
      args: ReadonlyArray<string>,
      decode: (reply: unknown) => A | undefined
    ): Effect.Effect<A, LockBackendError> =>
      budgeted(
        Effect.async<A, LockBackendError>((resume) => {
          runCommandScript(script, keys, args, (reply) => {
            const value = decode(reply)
            resume(value === undefined ? Effect.fail(unexpected(operation, key, reply)) : Effect.succeed(value))
          }, (cause) => resume(Effect.fail(fail(operation, key, cause))))
        }),
        operation,
        key
      )

    const releaseArgs = (key: string, owner: string) => {
      const keys = layout.keysOf(key)
      return [[keys.lock, keys.channel], [owner, unlockMessage]] as const
    }

    // The acquire script may have run although its reply never reached the caller (a command
    // timeout, a dropped connection, an interrupted caller). Its hold is then released here, owner
    // checked, and ordered right after the acquire: at once on the same connection, or, when that
    // connection dropped, as the very first command once it is back (written from the "ready"
    // handler, before any waiting call resumes). The acquire is never resent, so it ran before the
    // drop or not at all, and no other command of this backend gets in between. The release
    // decrements, so it can only ever cancel that one acquire, never a hold the owner takes later.
    const compensate = (request: LockRequest, why: string) => {
      const annotate = Effect.annotateLogs({ backend, key: request.key, owner: request.owner, why })
      const noReply = (error: unknown) =>
        runFork(annotate(Effect.logWarning(
          "A compensating release for an acquire whose reply was lost got no reply either; " +
            "if the acquire took the lock, the lock ends with its lease"
        ).pipe(Effect.annotateLogs("error", error instanceof Error ? error.message : String(error)))))
      const send = () => {
        const [keys, args] = releaseArgs(request.key, request.owner)
        runCommandScript(scripts.release, keys, args, (reply) => {
          if (reply !== -1) {
            runFork(annotate(Effect.logWarning("Released a lock taken by an acquire whose reply was lost")))
          }
        }, noReply)
      }
      if (clear()) return send()
      const waiter = (connected: boolean) => {
        connectionWaiters.delete(waiter)
        if (connected) send()
        else noReply(new Error("the connection is closed"))
      }
      connectionWaiters.add(waiter)
    }

    /**
     * A script call that may take the lock for `request.owner`. If it may have run but its reply
     * is lost or comes too late for the caller (`took` says whether it took the lock), that hold
     * is released again (see `compensate`).
     */
    const callTaking = <A>(
      operation: string,
      request: LockRequest,
      script: Script,
      keys: ReadonlyArray<string>,
      args: ReadonlyArray<string>,
      decode: (reply: unknown) => A | undefined,
      took: (result: A) => boolean
    ): Effect.Effect<A, LockBackendError> =>
      budgeted(
        Effect.async<A, LockBackendError>((resume) => {
          let abandoned = false
          let settled = false
          runCommandScript(script, keys, args, (reply) => {
            settled = true
            const result = decode(reply)
            if (!abandoned) {
              resume(result === undefined ? Effect.fail(unexpected(operation, request.key, reply)) : Effect.succeed(result))
            } else if (result !== undefined && took(result)) {
              compensate(request, "caller interrupted")
            }
          }, (cause) => {
            settled = true
            if (!certainlyNotRun(cause)) compensate(request, cause instanceof Error ? cause.message : String(cause))
            if (!abandoned) resume(Effect.fail(fail(operation, request.key, cause)))
          })
          // Interrupted while the script is in flight: whatever it turns out to have done must not
          // outlive this caller.
          return Effect.sync(() => {
            if (!settled) abandoned = true
          })
        }),
        operation,
        request.key
      )

    const tryAcquire = (request: LockRequest): Effect.Effect<AcquireResult, LockBackendError> => {
      const keys = layout.keysOf(request.key)
      return callTaking(
        "acquire",
        request,
        scripts.acquire,
        [keys.lock, keys.token],
        [String(request.leaseMillis), request.owner, request.fencing ? "1" : "0"],
        decodeAcquire,
        (result) => result._tag === "Acquired"
      )
    }

    const renew = (request: LockRequest): Effect.Effect<RenewResult, LockBackendError> =>
      call(
        "renew",
        request.key,
        scripts.renew,
        [layout.keysOf(request.key).lock],
        [String(request.leaseMillis), request.owner],
        decodeRenew
      )

    const plainRelease = (key: string, owner: string): Effect.Effect<boolean, LockBackendError> => {
      const [keys, args] = releaseArgs(key, owner)
      return call("release", key, scripts.release, keys, args, decodeRelease)
    }

    const handOver = (key: string, from: string, to: LockRequest): Effect.Effect<HandOverResult, LockBackendError> => {
      const keys = layout.keysOf(key)
      return callTaking(
        "release",
        to,
        scripts["hand-over"],
        [keys.lock, keys.channel, keys.token],
        [
          from,
          unlockMessage,
          to.owner,
          String(to.leaseMillis),
          to.fencing ? "1" : "0",
          // Our own subscriber among the channel's: any other one is a client elsewhere that waits.
          subscribedChannels.has(keys.channel) ? "1" : "0"
        ],
        decodeHandOver,
        (result) => result._tag === "HandedOver"
      )
    }

    // A server that refuses the hand-over script (an ACL user without `pubsub|numsub`, a Redis
    // older than 5.0) still gets plain releases: hand-overs stop for this backend, once, with a warning.
    let handOverRefused = false
    // Only refusals of the script itself; any other error (OOM, BUSY, ...) is a failed release.
    const refusedByServer = (error: LockBackendError) =>
      error.cause instanceof Error && error.cause.name === "ReplyError" &&
      /NOPERM|can't run this command|unknown command|non deterministic/i.test(error.cause.message)
    const handOverOrRelease = (key: string, from: string, to: LockRequest): Effect.Effect<HandOverResult, LockBackendError> =>
      handOver(key, from, to).pipe(
        Effect.catchIf(refusedByServer, (error) => {
          handOverRefused = true
          return Effect.logWarning(
            "Redis refused the hand-over script; releases notify waiters instead of handing the lock over"
          ).pipe(
            Effect.annotateLogs({ backend, error: error.cause instanceof Error ? error.cause.message : String(error.cause) }),
            Effect.zipRight(plainRelease(key, from)),
            Effect.map((held): HandOverResult => held ? { _tag: "Released" } : { _tag: "NotHeld" })
          )
        })
      )

    const release = (key: string, owner: string): Effect.Effect<boolean, LockBackendError> =>
      handOverRefused
        ? plainRelease(key, owner)
        : releaseHandingOver(queue, { release: plainRelease, handOver: handOverOrRelease }, key, owner)

    const forceRelease = (key: string): Effect.Effect<boolean, LockBackendError> => {
      const keys = layout.keysOf(key)
      return call("force-release", key, scripts["force-release"], [keys.lock, keys.channel], [unlockMessage], decodeForceRelease)
    }

    const inspect = (key: string): Effect.Effect<Option.Option<LockInfo>, LockBackendError> =>
      call("inspect", key, scripts.inspect, [layout.keysOf(key).lock], [], decodeInspect(key))

    // --- release notifications ---------------------------------------------------------------------

    const logSubscriptionFailure = (operation: string, channels: ReadonlyArray<string>) => (error: unknown) =>
      Effect.logWarning(
        `Redis ${operation} failed; waiters fall back to their retry schedule and the holder's lease`
      ).pipe(
        Effect.annotateLogs({ backend, channels: channels.join(" ") }),
        Effect.annotateLogs("error", error instanceof Error ? error.message : String(error))
      )

    // Channels this backend's subscriber is known to be subscribed to (SUBSCRIBE answered, and the
    // connection not lost since). A hand-over counts on it: see `handOver`.
    const subscribedChannels = new Set<string>()

    const subscribeChannels = (channels: ReadonlyArray<string>) =>
      channels.length === 0 ? Effect.void : Effect.tryPromise(() => subscriber.subscribe(...channels)).pipe(
        Effect.tap(() =>
          Effect.sync(() => {
            for (const channel of channels) subscribedChannels.add(channel)
          })
        ),
        Effect.asVoid,
        Effect.catchAll((error) => logSubscriptionFailure("SUBSCRIBE", channels)(error.error))
      )

    const queue = makeWaiterQueue({
      // A failed SUBSCRIBE does not fail the waiter: it is only woken later, by its schedule.
      onFirst: (key) => subscribeChannels([layout.channelOf(key)]),
      onLast: (key) => {
        const channel = layout.channelOf(key)
        subscribedChannels.delete(channel)
        return Effect.tryPromise(() => subscriber.unsubscribe(channel)).pipe(
          Effect.asVoid,
          Effect.catchAll((error) => logSubscriptionFailure("UNSUBSCRIBE", [channel])(error.error))
        )
      }
    })

    const onMessage = (channel: string) => {
      // Any message is a hint to retry: Redisson and effect-lock publish "0".
      for (const key of layout.keysOfChannel(channel)) queue.notify(key)
    }
    // Releases published while the subscriber was away were missed: resubscribe, then wake one
    // waiter per key to try again.
    const onSubscriberClose = () => subscribedChannels.clear()
    const onSubscriberReady = () => {
      runFork(
        Effect.suspend(() => subscribeChannels(queue.waitingKeys().map(layout.channelOf))).pipe(
          Effect.ensuring(Effect.sync(() => queue.notifyEveryKey()))
        )
      )
    }
    yield* listen(subscriber, { message: onMessage, close: onSubscriberClose, ready: onSubscriberReady })

    return LockBackend.of({
      name: backend,
      tryAcquire,
      renew,
      release,
      forceRelease,
      inspect,
      subscribe: queue.register,
      localWaiters: queue.waitersOn
    })
  })

/**
 * A layer providing a Redis `LockBackend`. The connections live as long as the layer.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { RedisBackend, withLock } from "effect-lock"
 *
 * const program = withLock("orders:42", Effect.log("alone"))
 * program.pipe(Effect.provide(RedisBackend.layer({ url: "redis://127.0.0.1:6379", prefix: "shop:" })))
 * ```
 *
 * @since 0.1.0
 * @category layers
 */
export const layer = (options: RedisBackendOptions = {}): Layer.Layer<LockBackend, LockBackendError> =>
  Layer.scoped(LockBackend, make(options))

/**
 * Like `layer`, with the URL read from the `REDIS_URL` config value (by default the environment
 * variable). The URL is read as `Redacted`, so a password in it never reaches a log.
 *
 * @since 0.1.0
 * @category layers
 */
export const layerConfig = (
  options: Omit<RedisBackendOptions, "url" | "client"> = {}
): Layer.Layer<LockBackend, LockBackendError | ConfigError> =>
  Layer.unwrapEffect(Effect.map(Config.redacted("REDIS_URL"), (url) => layer({ ...options, url })))
