/**
 * Graceful shutdown: closing a backend's layer (here `ManagedRuntime.dispose()`, as a service does
 * on SIGTERM) while locks are held interrupts the programs that hold them, releases their locks in
 * Redis, fails the waiters fast, and only then closes the connections: no lock lingers for its
 * lease, and nothing logs a connection error.
 */
import { afterAll, assert, beforeAll, describe, it } from "@effect/vitest"
import { Cause, Effect, Exit, Layer, Logger, LogLevel, ManagedRuntime, Option, Scope } from "effect"
import { Lock, LockBackendError, withLock } from "../../src/index.js"
import * as RedisBackend from "../../src/RedisBackend.js"
import type { RedisServer } from "../support/redisServer.js"
import { skipRedis, startRedisServer } from "../support/redisServer.js"
import { admin, cmd, eventually } from "./helpers.js"

const skip = skipRedis()

describe.skipIf(skip)("closing a Redis backend's layer", () => {
  let server: RedisServer
  beforeAll(async () => {
    server = await startRedisServer()
  })
  afterAll(() => server?.stop())

  const runtimeWithLogs = (prefix: string) => {
    const lines: Array<string> = []
    const logger = Logger.make((options) => void lines.push(Logger.logfmtLogger.log(options)))
    const layer = RedisBackend.layer({ url: server.url, prefix }).pipe(
      Layer.provide(Logger.replace(Logger.defaultLogger, logger)),
      Layer.provideMerge(Logger.minimumLogLevel(LogLevel.All))
    )
    const runtime = ManagedRuntime.make(
      Layer.merge(layer, Logger.replace(Logger.defaultLogger, logger))
    )
    return { runtime, lines }
  }

  it.scopedLive("interrupts the holders, releases their locks, fails the waiters, then closes", () =>
    Effect.gen(function*() {
      const redis = yield* admin(server.url)
      const { lines, runtime } = runtimeWithLogs("shutdown:")
      let interrupted = false
      const holding = runtime.runPromiseExit(
        withLock("job", Effect.never.pipe(Effect.onInterrupt(() => Effect.sync(() => interrupted = true))))
      )
      yield* eventually(Effect.map(cmd<number>(redis, "EXISTS", "shutdown:job"), (n) => n === 1), 5_000, "the lock")
      const waiting = runtime.runPromiseExit(withLock("job", Effect.void))
      // a lock held with Lock.acquire in a scope that outlives the backend
      const outer = yield* Scope.make()
      yield* Effect.promise(() => runtime.runPromise(Lock.acquire("report").pipe(Scope.extend(outer))))
      assert.strictEqual(yield* cmd(redis, "EXISTS", "shutdown:report"), 1)

      yield* Effect.promise(() => runtime.dispose())

      const held = yield* Effect.promise(() => holding)
      assert.isTrue(Exit.isFailure(held) && Cause.isInterruptedOnly(held.cause), "the holder's program was interrupted")
      assert.isTrue(interrupted)
      const waited = yield* Effect.promise(() => waiting)
      const error = Exit.isFailure(waited) ? Option.getOrUndefined(Cause.failureOption(waited.cause)) : undefined
      assert.instanceOf(error, LockBackendError, "the waiter failed fast")
      assert.match(String((error as LockBackendError).cause), /shutting down/)
      assert.strictEqual(yield* cmd(redis, "EXISTS", "shutdown:job"), 0, "the held lock was released")
      assert.strictEqual(yield* cmd(redis, "EXISTS", "shutdown:report"), 0, "the scoped lease was released")
      yield* Scope.close(outer, Exit.void) // its finaliser finds the lease already released
      // Nothing went wrong on the way: no warning, no error (a connection closed under a release
      // would log "Releasing lock ... failed" or "connection error").
      const problems = lines.filter((line) => /level=(WARN|ERROR|FATAL)/.test(line))
      assert.deepStrictEqual(problems, [])
      assert.isTrue(lines.some((line) => /Released 2 lock\(s\) while shutting down/.test(line)), lines.join("\n"))
    }))
})
