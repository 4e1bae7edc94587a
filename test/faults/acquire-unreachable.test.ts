/**
 * Redis unreachable or not answering while a lock is being acquired (scenario 7). The backend's
 * policy: every call has a budget of `commandTimeout` from the moment it is made; while the command
 * connection is (re)connecting the call waits for it within that budget, and it is then sent once,
 * never queued for later and never resent. When the budget runs out the call fails with
 * `LockBackendError`; an acquire whose reply did not arrive is undone by a compensating release.
 */
import { assert, describe, it } from "@effect/vitest"
import type { Scope } from "effect"
import { Effect, Fiber, FiberRef, HashSet, Logger, LogLevel, Schedule } from "effect"
import type { Redis } from "ioredis"
import { LockBackend, withLock } from "../../src/index.js"
import type { LockBackendError, LockBackendShape } from "../../src/index.js"
import * as RedisBackend from "../../src/RedisBackend.js"
import { redisServer, skipRedis } from "../support/redisServer.js"
import {
  adminClient,
  cmd,
  eventually,
  faultScenario,
  hrMillis,
  keyspace,
  measured,
  numsub,
  SLACK_MILLIS,
  tcpProxy,
  within
} from "./support.js"

const COMMAND_TIMEOUT = 500
const tokenKeyOf = (key: string) => `redisson_lock_token:{${key}}`

/** Every log line (logfmt) written while the rest of the test runs. */
const captureLogs = Effect.gen(function*() {
  const lines: Array<string> = []
  const logger = Logger.make((options) => {
    lines.push(Logger.logfmtLogger.log(options))
  })
  // Set before the backend is built: it logs from fibers of its own, which inherit these.
  yield* Effect.locallyScopedWith(FiberRef.currentLoggers, HashSet.add(logger))
  yield* Effect.locallyScoped(FiberRef.currentMinimumLogLevel, LogLevel.All)
  return lines
})

/** `withLock` on `key` through `backend`; the `LockBackendError` it fails with, and after how long. */
const failedAcquire = (backend: LockBackend["Type"], key: string) =>
  Effect.gen(function*() {
    const start = hrMillis()
    const error = yield* withLock(key, Effect.dieMessage("must not get the lock")).pipe(
      Effect.provideService(LockBackend, backend),
      Effect.flip,
      within(COMMAND_TIMEOUT + 10_000, "the failed acquire")
    )
    const elapsed = hrMillis() - start
    assert.strictEqual(error._tag, "LockBackendError", String(error))
    return [error as LockBackendError, elapsed] as const
  })

/** After a fault: the lock hash is gone and stays gone; only the fencing counter is left. */
const onlyTheCounterRemains = (redis: Redis, key: string) =>
  Effect.gen(function*() {
    yield* eventually(
      Effect.map(keyspace(redis), (keys) => keys.length === 1 && keys[0] === tokenKeyOf(key)),
      5_000,
      "only the fencing counter to remain"
    )
    assert.strictEqual(yield* cmd(redis, "GET", tokenKeyOf(key)), "1", "the acquire did run once Redis answered")
    // Nothing arrives later either.
    yield* Effect.sleep(300)
    assert.deepStrictEqual(yield* keyspace(redis), [tokenKeyOf(key)])
  })

/**
 * SIGSTOP the server, try to acquire through `makeBackend`'s backend: `LockBackendError` after the
 * command timeout (not before it, at most the slack after it); after SIGCONT only the fencing
 * counter remains.
 */
const acquireWhileServerStopped = <E>(
  label: string,
  makeBackend: (url: string) => Effect.Effect<LockBackendShape, E, Scope.Scope>
) =>
  faultScenario(Effect.gen(function*() {
    const key = "invoices"
    const server = yield* redisServer()
    const redis = yield* adminClient(server.url)
    const backend = yield* makeBackend(server.url)

    server.pause()
    const [error, elapsed] = yield* failedAcquire(backend, key).pipe(
      Effect.ensuring(Effect.sync(() => server.resume()))
    )
    measured(label, elapsed)
    assert.strictEqual(error.operation, "acquire")
    assert.isAtLeast(elapsed, COMMAND_TIMEOUT - 5)
    assert.isAtMost(elapsed, COMMAND_TIMEOUT + SLACK_MILLIS)
    yield* onlyTheCounterRemains(redis, key)
  }))

describe.skipIf(skipRedis(true))("faults: Redis unreachable or paused during acquire", () => {
  it.scopedLive(
    "CLIENT PAUSE ALL: LockBackendError after the command timeout; the acquire that runs when the pause ends is released again",
    () =>
      faultScenario(Effect.gen(function*() {
        const key = "invoices"
        const logs = yield* captureLogs
        const server = yield* redisServer()
        const redis = yield* adminClient(server.url)
        const backend = yield* RedisBackend.make({ url: server.url, commandTimeout: COMMAND_TIMEOUT })

        const pause = 1_500
        yield* cmd(redis, "CLIENT", "PAUSE", pause, "ALL")
        const pausedAt = hrMillis()
        const [error, elapsed] = yield* failedAcquire(backend, key)
        measured("CLIENT PAUSE: acquire failed after", elapsed)
        assert.strictEqual(error.operation, "acquire")
        assert.include(error.message, "timed out")
        assert.isAtLeast(elapsed, COMMAND_TIMEOUT - 5, "not before the command timeout")
        assert.isAtMost(elapsed, COMMAND_TIMEOUT + SLACK_MILLIS, "bounded by the command timeout")

        yield* Effect.sleep(Math.max(0, pausedAt + pause + 50 - hrMillis()))
        yield* onlyTheCounterRemains(redis, key)
        assert.isTrue(
          logs.some((line) => line.includes("an acquire whose reply was lost")),
          logs.join("\n")
        )
      }))
  )

  it.scopedLive(
    "redis-server paused (SIGSTOP): LockBackendError after the command timeout; after SIGCONT the keyspace holds no lock",
    () =>
      acquireWhileServerStopped(
        "SIGSTOP: acquire failed after",
        (url) => RedisBackend.make({ url, commandTimeout: COMMAND_TIMEOUT })
      )
  )

  it.scopedLive(
    "an external client without a command timeout of its own, server paused: withLock still fails after the backend's budget",
    () =>
      // ioredis defaults: no commandTimeout, offline queue on. withLock runs its attempts
      // uninterruptibly: the budget must stop the call all the same.
      acquireWhileServerStopped("external client, SIGSTOP: acquire failed after", (url) =>
        Effect.flatMap(adminClient(url), (client) =>
          RedisBackend.make({ client, commandTimeout: COMMAND_TIMEOUT })))
  )

  it.scopedLive(
    "redis-server stopped: LockBackendError after the command timeout, and nothing is replayed once Redis is back",
    () =>
      faultScenario(Effect.gen(function*() {
        const key = "invoices"
        const server = yield* redisServer()
        const backend = yield* RedisBackend.make({ url: server.url, commandTimeout: COMMAND_TIMEOUT })
        yield* Effect.promise(() => server.stop())
        // Let the backend see its connections drop: from now on Redis is unreachable.
        yield* Effect.sleep(200)

        const [error, elapsed] = yield* failedAcquire(backend, key)
        measured("stopped: acquire failed after", elapsed)
        assert.strictEqual(error.operation, "acquire")
        assert.include(error.message, "not reachable")
        assert.isAtLeast(elapsed, COMMAND_TIMEOUT - 5, "it waited for a reconnect within its budget")
        assert.isAtMost(elapsed, COMMAND_TIMEOUT + SLACK_MILLIS, "and no longer")

        yield* Effect.promise(() => server.restart())
        const redis = yield* adminClient(server.url)
        yield* eventually(Effect.isSuccess(backend.primitives.inspect("probe")), 10_000, "the backend to reconnect")
        yield* Effect.sleep(300)
        assert.strictEqual(yield* cmd(redis, "DBSIZE"), 0, "the failed acquire never ran, not even later")
      }))
  )

  it.scopedLive(
    "the connection drops after the acquire ran but before its reply: LockBackendError, and the compensating release goes out first once the connection is back",
    () =>
      faultScenario(Effect.gen(function*() {
        const key = "invoices"
        const logs = yield* captureLogs
        const server = yield* redisServer()
        const redis = yield* adminClient(server.url)
        const proxy = yield* tcpProxy(server.port)
        const backend = yield* RedisBackend.make({ url: proxy.url, commandTimeout: "5 seconds" })

        proxy.dropReplies = true
        const attempt = yield* Effect.fork(failedAcquire(backend, key))
        yield* eventually(
          Effect.map(cmd(redis, "GET", tokenKeyOf(key)), (token) => token === "1"),
          5_000,
          "the acquire to run on the server"
        )
        assert.strictEqual(yield* cmd(redis, "EXISTS", key), 1, "it took the lock, and its reply is lost")
        proxy.dropReplies = false
        proxy.cut()

        const [error, elapsed] = yield* Fiber.join(attempt)
        measured("dropped connection: acquire failed after", elapsed)
        assert.strictEqual(error.operation, "acquire")
        assert.isBelow(elapsed, 5_000, "failed when the connection dropped, not at the command timeout")
        // ioredis reconnects (through the proxy) within a few hundred ms; the release goes out then.
        yield* onlyTheCounterRemains(redis, key)
        assert.isTrue(
          logs.some((line) => line.includes("Released a lock taken by an acquire whose reply was lost")),
          logs.join("\n")
        )
      }))
  )

  it.scopedLive(
    "the command connection drops as a waiter is woken: its attempt waits for the reconnect (within the command timeout) and gets in",
    () =>
      faultScenario(Effect.gen(function*() {
        const key = "exports"
        const server = yield* redisServer()
        const redis = yield* adminClient(server.url)
        const backend = yield* RedisBackend.make({
          url: server.url,
          commandTimeout: "2 seconds",
          redis: { connectionName: "waiter" }
        })
        const other = yield* RedisBackend.make({ url: server.url })
        const held = yield* other.primitives.tryAcquire({
          key,
          owner: "elsewhere:1",
          leaseMillis: 20_000,
          fencing: true
        })
        assert.strictEqual(held._tag, "Acquired")
        const waiter = yield* Effect.fork(
          withLock(key, (lease) => Effect.succeed(lease.fencingToken), { retry: Schedule.spaced("60 seconds") }).pipe(
            Effect.provideService(LockBackend, backend)
          )
        )
        yield* eventually(
          Effect.map(numsub(redis, `redisson_lock__channel:{${key}}`), (n) => n === 1),
          5_000,
          "the waiter"
        )

        const clients = (yield* cmd<string>(redis, "CLIENT", "LIST")).split("\n")
        const commandConnection = clients.find((line) => / name=waiter /.test(line) && / flags=N /.test(line))
        const id = /^id=(\d+) /.exec(commandConnection ?? "")?.[1]
        assert.isDefined(id, clients.join("\n"))
        assert.strictEqual(yield* cmd(redis, "CLIENT", "KILL", "ID", id!), 1)
        // The release notification reaches the waiter (its subscriber is fine) while its command
        // connection is reconnecting.
        assert.deepStrictEqual(yield* other.primitives.release(key, "elsewhere:1"), { _tag: "Released" })

        const token = yield* Fiber.join(waiter).pipe(within(10_000, "the waiter"))
        assert.strictEqual(token, 2n)
        yield* eventually(
          Effect.map(keyspace(redis), (keys) => keys.join() === tokenKeyOf(key)),
          5_000,
          "only the counter"
        )
      }))
  )
})
