/**
 * The test support's `redis-server` processes are scoped `Command` resources: whatever ends the
 * scope (success, failure, interruption, a paused server), the process is gone afterwards and its
 * port is free again.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Fiber, Scope } from "effect"
import { createServer } from "node:net"
import { ping, redisServer, skipRedis, startRedisServer } from "./support/redisServer.js"

const skip = skipRedis(true)

/** Whether `port` can be bound again on loopback: no process holds it any more. */
const portFree = (port: number) =>
  Effect.async<boolean>((resume) => {
    const server = createServer()
    server.once("error", () => resume(Effect.succeed(false)))
    server.listen(port, "127.0.0.1", () => server.close(() => resume(Effect.succeed(true))))
  })

const answers = (port: number) => Effect.promise(() => ping(port))

describe.skipIf(skip)("test support: redis-server as a scoped Command", () => {
  it.live("a scope that fails still stops its server", () =>
    Effect.gen(function*() {
      const scope = yield* Scope.make()
      const server = yield* Scope.extend(redisServer(), scope)
      assert.isTrue(yield* answers(server.port))
      yield* Scope.close(scope, Exit.fail("the test failed"))
      assert.isFalse(yield* answers(server.port))
      assert.isTrue(yield* portFree(server.port))
    }))

  it.live("an interrupted test stops its server, even a paused one", () =>
    Effect.gen(function*() {
      let port = 0
      const fiber = yield* Effect.fork(Effect.scoped(Effect.gen(function*() {
        const server = yield* redisServer()
        port = server.port
        server.pause()
        return yield* Effect.never
      })))
      while (port === 0) yield* Effect.sleep(10)
      yield* Fiber.interrupt(fiber)
      assert.isTrue(yield* portFree(port))
    }))

  it.scopedLive("restart gives a fresh, empty server on the same port; stop is idempotent", () =>
    Effect.gen(function*() {
      const server = yield* redisServer()
      yield* Effect.promise(() => server.restart())
      assert.isTrue(yield* answers(server.port))
      yield* Effect.promise(() => server.stop())
      yield* Effect.promise(() => server.stop())
      assert.isTrue(yield* portFree(server.port))
    }))

  it.live("the promise form: stop() closes the process's scope", () =>
    Effect.gen(function*() {
      const server = yield* Effect.promise(() => startRedisServer({ args: ["--requirepass", "secret"] }))
      assert.isTrue(yield* answers(server.port))
      yield* Effect.promise(() => server.stop())
      assert.isTrue(yield* portFree(server.port))
    }))

  it.live("a server that cannot start fails with its output, and leaves nothing behind", () =>
    Effect.gen(function*() {
      const error = yield* Effect.flip(Effect.scoped(redisServer({ args: ["--no-such-option", "1"] })))
      assert.match(error.message, /no-such-option|Bad directive|exited/i)
    }))
})
