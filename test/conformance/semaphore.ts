/**
 * The semaphore's conformance suite, written once and run over every backend (Memory in
 * test/memory.semaphore.test.ts, Redis in test/redis/semaphore.test.ts), on the live clock with
 * short leases.
 */
import { assert, describe, layer as withLayer } from "@effect/vitest"
import type { Layer } from "effect"
import { Deferred, Effect, Exit, Fiber, Option, Schedule } from "effect"
import { LockBackend, Semaphore } from "../../src/index.js"
import type { SemaphorePrimitives } from "../../src/LockBackend.js"

let keySeq = 0
const freshKey = (label: string) => `semaphore:${label}:${process.pid}:${Date.now()}:${++keySeq}`

const semaphoreOf = Effect.flatMap(
  LockBackend,
  (backend): Effect.Effect<SemaphorePrimitives> =>
    backend.primitives.semaphore === undefined
      ? Effect.dieMessage("the backend has no semaphore primitives")
      : Effect.succeed(backend.primitives.semaphore)
)

/** Take `n` permits as a foreign client that never renews nor releases (a crashed holder). */
const occupy = (key: string, n: number, total: number, leaseMillis: number, owner = "foreign-client:1") =>
  Effect.flatMap(semaphoreOf, (semaphore) =>
    Effect.flatMap(
      semaphore.tryAcquire({ key, owner, permits: n, total, leaseMillis, fencing: true }),
      (result) => result._tag === "Acquired" ? Effect.void : Effect.dieMessage(`${key}: too few permits free`)
    ))

/** Poll until `check` holds (live clock). */
const eventually = <E, R>(check: Effect.Effect<boolean, E, R>, what: string) =>
  Effect.gen(function*() {
    for (let i = 0; i < 500; i++) {
      if (yield* check) return
      yield* Effect.sleep(10)
    }
    return yield* Effect.dieMessage(`timed out waiting for ${what}`)
  })

export const runSemaphoreConformance = (name: string, layer: Layer.Layer<LockBackend, unknown>) =>
  describe(`semaphore conformance: ${name}`, () => {
    withLayer(layer, { timeout: 60_000, excludeTestServices: true })((it) => {
      it.effect("withPermits runs the program, returns its value and gives the permits back", () =>
        Effect.gen(function*() {
          const key = freshKey("basic")
          const inside = yield* Semaphore.withPermits(key, 2, Semaphore.available(key), { permits: 5 })
          assert.strictEqual(inside, 3)
          assert.strictEqual(yield* Semaphore.available(key), 5)
          const info = yield* Semaphore.inspect(key)
          assert.deepStrictEqual(info, { key, available: 5, acquired: 0, total: 5 })
        }))

      it.effect("the call forms and the lease-function form all take permits", () =>
        Effect.gen(function*() {
          const key = freshKey("forms")
          const free = Semaphore.available(key)
          assert.strictEqual(yield* Effect.scoped(Semaphore.withPermits(key, 1, free, { permits: 3 })), 2)
          assert.strictEqual(yield* free.pipe(Semaphore.withPermits(key, 2, { permits: 3, wait: "5 seconds" })), 1)
          const lease = yield* Semaphore.withPermits(key, 3, (lease) => Effect.succeed(lease), { permits: 3 })
          assert.strictEqual(lease.permits, 3)
          assert.strictEqual(lease.key, key)
          assert.isTrue(lease.fencingToken > 0n)
          assert.strictEqual(yield* free, 3)
        }))

      it.effect("never more than the total inside, with mixed request sizes, and fencing tokens all distinct", () =>
        Effect.gen(function*() {
          const key = freshKey("bound")
          let inUse = 0
          let maxInUse = 0
          const tokens: Array<bigint> = []
          const worker = (n: number) =>
            Semaphore.withPermits(key, n, (lease) =>
              Effect.gen(function*() {
                tokens.push(lease.fencingToken)
                inUse += n
                maxInUse = Math.max(maxInUse, inUse)
                yield* Effect.sleep(3)
                inUse -= n
              }), { permits: 4, lease: "5 seconds" })
          yield* Effect.all(Array.from({ length: 24 }, (_, i) => worker(1 + (i % 3))), { concurrency: "unbounded" })
          assert.isAtMost(maxInUse, 4)
          assert.isAtLeast(maxInUse, 2)
          assert.strictEqual(new Set(tokens).size, 24)
          assert.strictEqual(yield* Semaphore.available(key), 4)
        }))

      it.effect("waiters are served in arrival order: a large request is not overtaken by a later small one", () =>
        Effect.gen(function*() {
          const key = freshKey("order")
          const order: Array<string> = []
          const holding = yield* Deferred.make<void>()
          const stop = yield* Deferred.make<void>()
          const holder = yield* Effect.fork(
            Semaphore.withPermits(key, 1, Effect.zipRight(Deferred.succeed(holding, undefined), Deferred.await(stop)), {
              permits: 4
            })
          )
          yield* Deferred.await(holding)
          const big = yield* Effect.fork(
            Semaphore.withPermits(key, 4, Effect.sync(() => order.push("big")), { permits: 4 })
          )
          yield* Effect.sleep(50)
          // Three permits are free: a small request that barged in would get them at once.
          const small = yield* Effect.fork(
            Semaphore.withPermits(key, 1, Effect.sync(() => order.push("small")), { permits: 4 })
          )
          yield* Effect.sleep(50)
          assert.deepStrictEqual(order, [])
          yield* Deferred.succeed(stop, undefined)
          yield* Fiber.join(holder)
          yield* Fiber.join(big)
          yield* Fiber.join(small)
          assert.deepStrictEqual(order, ["big", "small"])
        }))

      it.effect("a waiter that gives up from behind the window lets in the smaller requests behind it", () =>
        Effect.gen(function*() {
          // 2 of 4 permits held; a request for 3 heads the queue (it must wait), one for 4 behind it
          // closes the window, and one for 1 waits behind that. When the request for 4 gives up, the
          // window is 3 + 1 and the request for 1 fits beside the held 2: it gets in at once.
          const key = freshKey("window")
          const holding = yield* Deferred.make<void>()
          const stop = yield* Deferred.make<void>()
          const options = { permits: 4, retry: Schedule.spaced("1 hour") }
          const holder = yield* Effect.fork(
            Semaphore.withPermits(
              key,
              2,
              Effect.zipRight(Deferred.succeed(holding, undefined), Deferred.await(stop)),
              options
            )
          )
          yield* Deferred.await(holding)
          const three = yield* Effect.fork(Semaphore.withPermits(key, 3, Effect.void, options))
          yield* Effect.sleep(50)
          const four = yield* Effect.fork(Semaphore.withPermits(key, 4, Effect.void, options))
          yield* Effect.sleep(50)
          const one = yield* Effect.fork(Semaphore.withPermits(key, 1, Effect.succeed("in"), options))
          yield* Effect.sleep(50)
          assert.isTrue(Option.isNone(yield* Fiber.poll(one)), "the request for 1 waits in line")
          yield* Fiber.interrupt(four)
          // Woken by the window growing: the hour-long retry schedule cannot be what lets it in.
          assert.strictEqual(yield* Fiber.join(one).pipe(Effect.timeout("10 seconds")), "in")
          yield* Deferred.succeed(stop, undefined)
          yield* Fiber.join(holder)
          yield* Fiber.join(three)
        }))

      it.effect("a release wakes the waiters by notification, not by their retry schedule", () =>
        Effect.gen(function*() {
          const key = freshKey("notify")
          const holding = yield* Deferred.make<void>()
          const stop = yield* Deferred.make<void>()
          const holder = yield* Effect.fork(
            Semaphore.withPermits(key, 2, Effect.zipRight(Deferred.succeed(holding, undefined), Deferred.await(stop)), {
              permits: 2,
              lease: "1 minute"
            })
          )
          yield* Deferred.await(holding)
          // Nothing but a notification can wake these in time: their schedule waits an hour, and the
          // holder's lease lasts a minute (and is renewed).
          const retry = Schedule.spaced("1 hour")
          const waiters = yield* Effect.fork(
            Effect.all([
              Semaphore.withPermits(key, 1, Effect.succeed(1), { retry }),
              Semaphore.withPermits(key, 1, Effect.succeed(2), { retry })
            ], { concurrency: "unbounded" })
          )
          yield* Effect.sleep(100)
          yield* Deferred.succeed(stop, undefined)
          yield* Fiber.join(holder)
          const done = yield* Fiber.join(waiters).pipe(Effect.timeout("10 seconds"))
          assert.deepStrictEqual(done, [1, 2])
        }))

      it.effect("acquire holds the permits until the scope closes; tryAcquire is None when too few are free", () =>
        Effect.gen(function*() {
          const key = freshKey("scoped")
          yield* Effect.scoped(Effect.gen(function*() {
            const lease = yield* Semaphore.acquire(key, 2, { permits: 3 })
            assert.strictEqual(lease.permits, 2)
            assert.isTrue(yield* lease.isHeld)
            assert.isTrue(Option.isNone(yield* Semaphore.tryAcquire(key, 2, { permits: 3 })))
            assert.isTrue(Option.isSome(yield* Semaphore.tryAcquire(key, 1, { permits: 3 })))
            assert.strictEqual(yield* Semaphore.available(key), 0)
            const none = yield* Semaphore.withPermitsIfAvailable(key, 1, Effect.succeed("ran"), { permits: 3 })
            assert.isTrue(Option.isNone(none))
          }))
          assert.strictEqual(yield* Semaphore.available(key), 3)
          const some = yield* Semaphore.withPermitsIfAvailable(key, 3, Effect.succeed("ran"), { permits: 3 })
          assert.deepStrictEqual(some, Option.some("ran"))
        }))

      it.effect("a bounded wait ends in LockTimeoutError and leaves nothing behind", () =>
        Effect.gen(function*() {
          const key = freshKey("timeout")
          yield* occupy(key, 2, 2, 5_000)
          const error = yield* Effect.flip(
            Semaphore.withPermits(key, 1, Effect.void, { permits: 2, wait: "100 millis" })
          )
          assert.strictEqual(error._tag, "LockTimeoutError")
          const info = yield* Semaphore.inspect(key)
          assert.strictEqual(info.acquired, 2)
          assert.strictEqual(info.available, 0)
        }))

      it.effect("the permits of a crashed holder come back when its lease ends, and wake a waiter", () =>
        Effect.gen(function*() {
          const key = freshKey("crash")
          yield* occupy(key, 3, 3, 300)
          assert.strictEqual(yield* Semaphore.withPermits(key, 3, Effect.succeed("in"), { permits: 3 }), "in")
          assert.strictEqual(yield* Semaphore.available(key), 3)
        }))

      it.effect("interrupting a waiter leaves nothing behind", () =>
        Effect.gen(function*() {
          const key = freshKey("interrupt")
          yield* occupy(key, 1, 1, 2_000)
          const waiter = yield* Effect.fork(Semaphore.withPermits(key, 1, Effect.void, { permits: 1 }))
          yield* Effect.sleep(50)
          yield* Fiber.interrupt(waiter)
          const info = yield* Semaphore.inspect(key)
          assert.strictEqual(info.acquired, 1)
          // The foreign holder's lease ends; nobody takes the permit.
          yield* eventually(Effect.map(Semaphore.available(key), (n) => n === 1), "the permit to come back")
          assert.strictEqual((yield* Semaphore.inspect(key)).acquired, 0)
        }))

      it.effect("setPermits grows the total at run time and wakes waiters", () =>
        Effect.gen(function*() {
          const key = freshKey("grow")
          yield* Semaphore.setPermits(key, 1)
          yield* occupy(key, 1, 1, 10_000)
          const waiter = yield* Effect.fork(Semaphore.withPermits(key, 2, Effect.succeed("in")))
          yield* Effect.sleep(50)
          yield* Semaphore.setPermits(key, 3)
          assert.strictEqual(yield* Fiber.join(waiter), "in")
        }))

      it.effect("setPermits shrinking never revokes a held permit", () =>
        Effect.gen(function*() {
          const key = freshKey("shrink")
          yield* Effect.scoped(Effect.gen(function*() {
            const lease = yield* Semaphore.acquire(key, 3, { permits: 3, lease: "1 second" })
            yield* Semaphore.setPermits(key, 1)
            const info = yield* Semaphore.inspect(key)
            assert.deepStrictEqual(info, { key, available: -2, acquired: 3, total: 1 })
            assert.strictEqual(yield* Semaphore.available(key), 0)
            // Renewals keep it past several lease lengths' worth of renew periods.
            yield* Effect.sleep(700)
            assert.isTrue(yield* lease.isHeld)
            assert.isTrue(Option.isNone(yield* Semaphore.tryAcquire(key, 1)))
          }))
          assert.deepStrictEqual(yield* Semaphore.inspect(key), { key, available: 1, acquired: 0, total: 1 })
        }))

      it.effect("permits taken away from a holder interrupt its program with LockLostError", () =>
        Effect.gen(function*() {
          const key = freshKey("lost")
          const semaphore = yield* semaphoreOf
          const exit = yield* Effect.exit(
            Semaphore.withPermits(
              key,
              1,
              (lease) => Effect.zipRight(semaphore.release(key, lease.owner, 1), Effect.never),
              { permits: 2, lease: "300 millis" }
            )
          )
          assert.isTrue(Exit.isFailure(exit))
          const error = yield* Effect.flip(exit)
          assert.strictEqual(error._tag, "LockLostError")
          if (error._tag === "LockLostError") assert.strictEqual(error.key, key)
          assert.strictEqual(yield* Semaphore.available(key), 2)
        }))

      it.effect("bad input is a LockOptionsError and writes nothing", () =>
        Effect.gen(function*() {
          const key = freshKey("bad")
          const fields = yield* Effect.all([
            Effect.flip(Semaphore.withPermits(key, 0, Effect.void, { permits: 2 })),
            Effect.flip(Semaphore.withPermits(key, 3, Effect.void, { permits: 2 })),
            Effect.flip(Semaphore.withPermits(key, 1, Effect.void, { permits: 1.5 })),
            Effect.flip(Semaphore.withPermits("", 1, Effect.void, { permits: 2 })),
            Effect.flip(Semaphore.withPermits(key, 1, Effect.void, { permits: 2, lease: -1 })),
            Effect.flip(Semaphore.setPermits(key, -1))
          ])
          for (const error of fields) assert.strictEqual(error._tag, "LockOptionsError")
          assert.deepStrictEqual(yield* Semaphore.inspect(key), { key, available: 0, acquired: 0, total: 0 })
        }))
    })
  })
