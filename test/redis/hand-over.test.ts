/**
 * Hand-over on Redis: a release by a holder in this process gives the lock straight to the local
 * waiter it would have woken, in the release's own round trip, unless another client waits on the
 * key's channel too. Run against a real redis-server; `CLIENT PAUSE WRITE` holds the hand-over
 * script in flight to exercise the races around it.
 */
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Exit, Fiber, Option, Schedule } from "effect"
import type { Scope } from "effect"
import type { Redis } from "ioredis"
import type { LockBackendShape, LockOptions } from "../../src/index.js"
import { LockBackend, withLock } from "../../src/index.js"
import { backendOf } from "../../src/internal/backend/make.js"
import * as RedisBackend from "../../src/RedisBackend.js"
import { redisServer, skipRedis } from "../support/redisServer.js"
import { admin, cmd, eventually, listen } from "./helpers.js"

/** Calls of `name` in `INFO commandstats`, script-internal calls included. */
const calls = (redis: Redis, name: string) =>
  Effect.map(cmd<string>(redis, "INFO", "commandstats"), (info) => {
    const match = new RegExp(`^cmdstat_${name}:calls=(\\d+)`, "m").exec(info)
    return match === null ? 0 : Number(match[1])
  })

/** A fiber holding `key` until `release` is completed; returns its fencing token. */
const holding = (key: string, release: Deferred.Deferred<void>) =>
  Effect.gen(function*() {
    const entered = yield* Deferred.make<bigint>()
    const fiber = yield* Effect.fork(
      withLock(key, (lease) => Effect.zipRight(Deferred.succeed(entered, lease.fencingToken), Deferred.await(release)))
    )
    const token = yield* Deferred.await(entered)
    return { fiber, token }
  })

/**
 * A waiter on `key` that returns its token, once it is parked: queued (its key's local queue counts it)
 * and done with its attempts (no script call for 100 ms; its schedule would wait a minute).
 */
const waiting = (redis: Redis, backend: LockBackendShape, key: string, count: number, options: LockOptions = {}) =>
  Effect.gen(function*() {
    const fiber = yield* Effect.fork(
      withLock(key, (lease) => Effect.succeed(lease.fencingToken), { retry: Schedule.spaced("60 seconds"), ...options })
    )
    yield* eventually(
      Effect.sync(() => backendOf(backend).queue.waitersOn(key) >= count),
      5_000,
      `waiter ${count} queued`
    )
    let before = -1
    yield* eventually(
      Effect.gen(function*() {
        const now = yield* calls(redis, "evalsha")
        const quiet = now === before
        before = now
        if (!quiet) yield* Effect.sleep(100)
        return quiet
      }),
      5_000,
      `waiter ${count} parked`
    )
    return fiber
  })

interface Env {
  /** An admin connection. */
  readonly redis: Redis
  readonly url: string
  readonly backend: LockBackendShape
}

/**
 * A fresh redis-server, an admin connection to it, and a backend on it provided as the
 * `LockBackend` service to `body`. `prepare` may set the server up first and return the URL the
 * backend connects with (a user's, say).
 */
const onFreshServer = <A, E>(
  body: (env: Env) => Effect.Effect<A, E, LockBackend | Scope.Scope>,
  prepare: (redis: Redis, port: number) => Effect.Effect<string> = (_, port) =>
    Effect.succeed(`redis://127.0.0.1:${port}`)
) =>
  Effect.gen(function*() {
    const server = yield* redisServer()
    const redis = yield* admin(server.url)
    const backend = yield* RedisBackend.make({ url: yield* prepare(redis, server.port) })
    return yield* body({ redis, url: server.url, backend }).pipe(Effect.provideService(LockBackend, backend))
  })

describe.skipIf(skipRedis(true))("hand-over on Redis", () => {
  it.scopedLive("a release hands the lock to the parked local waiter in one call: no notification, no attempt of its own", () =>
    onFreshServer(({ backend, redis }) =>
      Effect.gen(function*() {
        const release = yield* Deferred.make<void>()
        const holder = yield* holding("k", release)
        const waiter = yield* waiting(redis, backend, "k", 1)
        const [evalsBefore, publishesBefore] = [yield* calls(redis, "evalsha"), yield* calls(redis, "publish")]
        yield* Deferred.succeed(release, void 0)
        yield* Fiber.join(holder.fiber)
        const token = yield* Fiber.join(waiter)
        assert.strictEqual(token, holder.token + 1n, "the receiver drew the next token")
        // The hand-over, then the receiver's own release (a plain one: nobody waits any more).
        assert.strictEqual((yield* calls(redis, "evalsha")) - evalsBefore, 2, "no acquire attempt by the receiver")
        assert.strictEqual((yield* calls(redis, "publish")) - publishesBefore, 1, "only the last release published")
        assert.isTrue(Option.isNone(yield* backend.primitives.inspect("k")))
      })
    ))

  it.scopedLive("another client waiting on the channel (another process, Redisson) gets the notification: no hand-over", () =>
    onFreshServer(({ backend, redis, url }) =>
      Effect.gen(function*() {
        // Another client waiting on the key: subscribed to its release channel.
        const messages = yield* listen(url, "redisson_lock__channel:{k}")
        const release = yield* Deferred.make<void>()
        const holder = yield* holding("k", release)
        const waiter = yield* waiting(redis, backend, "k", 1)
        yield* Deferred.succeed(release, void 0)
        yield* Fiber.join(holder.fiber)
        // The local waiter still gets in, woken by the same notification the other client got.
        assert.strictEqual(yield* Fiber.join(waiter), holder.token + 1n)
        yield* eventually(Effect.sync(() => messages.length >= 2), 5_000, "both releases published")
        assert.deepStrictEqual(messages, ["0", "0"])
      })
    ))

  it.scopedLive("with this process's own subscription missing (SUBSCRIBE refused), a single other subscriber still gets the notification", () =>
    onFreshServer(
      ({ backend, redis, url }) =>
        Effect.gen(function*() {
          // SUBSCRIBE revoked once the backend runs (a user without it is refused at startup).
          yield* cmd(redis, "ACL", "SETUSER", "nosub", "-subscribe")
          // Another client waiting on the key: subscribed to its release channel.
          const messages = yield* listen(url, "redisson_lock__channel:{k}")
          const release = yield* Deferred.make<void>()
          const holder = yield* holding("k", release)
          const inside = yield* Deferred.make<bigint>()
          const leave = yield* Deferred.make<void>()
          const waiter = yield* Effect.fork(
            withLock(
              "k",
              (lease) => Effect.zipRight(Deferred.succeed(inside, lease.fencingToken), Deferred.await(leave)),
              {
                retry: Schedule.spaced("100 millis")
              }
            )
          )
          yield* eventually(Effect.sync(() => backendOf(backend).queue.waitersOn("k") >= 1), 5_000, "the waiter queued")
          yield* Effect.sleep(50)
          yield* Deferred.succeed(release, void 0)
          yield* Fiber.join(holder.fiber)
          // The local waiter got in by its schedule; while it holds the lock, the other client has
          // had the holder's notification (the waiter's own release has not happened yet).
          assert.strictEqual(yield* Deferred.await(inside), holder.token + 1n)
          yield* eventually(Effect.sync(() => messages.length >= 1), 5_000, "the holder's notification")
          yield* Deferred.succeed(leave, void 0)
          yield* Fiber.join(waiter)
        }), // A user that may do everything (SUBSCRIBE is revoked above): this backend's waiters get no notifications.
      (redis, port) =>
        Effect.as(
          cmd(redis, "ACL", "SETUSER", "nosub", "on", ">pw", "~*", "&*", "+@all"),
          `redis://nosub:pw@127.0.0.1:${port}`
        )
    ))

  it.scopedLive("the receiver is interrupted while the hand-over is in flight: the lock is released for it and goes to the next waiter", () =>
    onFreshServer(({ backend, redis }) =>
      Effect.gen(function*() {
        const release = yield* Deferred.make<void>()
        const holder = yield* holding("k", release)
        const first = yield* waiting(redis, backend, "k", 1)
        const second = yield* waiting(redis, backend, "k", 2)
        // Writes (scripts included) wait until the pause ends: the hand-over to `first` is in flight.
        yield* cmd(redis, "CLIENT", "PAUSE", 500, "WRITE")
        yield* Deferred.succeed(release, void 0)
        yield* Effect.sleep(100)
        yield* Fiber.interrupt(first)
        assert.isTrue(Exit.isInterrupted(yield* Fiber.await(first)))
        yield* Fiber.join(holder.fiber)
        // `first` was given the lock (token + 1) after it left; its release handed it to `second`.
        assert.strictEqual(yield* Fiber.join(second), holder.token + 2n)
        assert.isTrue(Option.isNone(yield* backend.primitives.inspect("k")), "no lock left")
        assert.strictEqual(backendOf(backend).queue.waitersOn("k"), 0)
      })
    ))

  it.scopedLive("the receiver's wait runs out while the hand-over is in flight: it waits for it and holds the lock", () =>
    onFreshServer(({ backend, redis }) =>
      Effect.gen(function*() {
        const release = yield* Deferred.make<void>()
        const holder = yield* holding("k", release)
        const waiter = yield* waiting(redis, backend, "k", 1, { wait: "300 millis" })
        yield* cmd(redis, "CLIENT", "PAUSE", 600, "WRITE")
        yield* Deferred.succeed(release, void 0)
        // The waiter's 300 ms run out during the pause; the hand-over then lands.
        assert.strictEqual(yield* Fiber.join(waiter), holder.token + 1n)
        yield* Fiber.join(holder.fiber)
        assert.isTrue(Option.isNone(yield* backend.primitives.inspect("k")), "no lock left")
      })
    ))
})
