/**
 * The fair lock's conformance suite, run over every backend (memory in
 * test/memory.fair.test.ts, Redis in test/redis/fair.test.ts), on the live clock.
 */
import { assert, describe, layer as withLayer } from "@effect/vitest"
import type { Layer } from "effect"
import { Deferred, Effect, Exit, Fiber, Option, Schedule } from "effect"
import { FairLock, Lock, LockBackend } from "../../src/index.js"
import { backendOf } from "../../src/internal/backend/make.js"

let keySeq = 0
const freshKey = (label: string) => `fair:${label}:${process.pid}:${Date.now()}:${++keySeq}`

/** The fair kind's primitives on the current backend. */
const fairPrimitives = Effect.map(LockBackend, (service) => {
  const fair = backendOf(service).kinds.fair
  if (fair === undefined) throw new Error("no fair kind")
  return fair.primitives
})

export const runFairConformance = (name: string, layer: Layer.Layer<LockBackend, unknown>) =>
  describe(`fair lock conformance: ${name}`, () => {
    withLayer(layer, { timeout: 60_000, excludeTestServices: true })((it) => {
      it.effect("all the forms lock, and the lock is released after", () =>
        Effect.gen(function*() {
          const key = freshKey("forms")
          const held = Lock.isLocked(key)
          assert.isTrue(yield* FairLock.withLock(key, held))
          assert.isTrue(yield* FairLock.withLock(key, held, { lease: "10 seconds", wait: "5 seconds" }))
          assert.isTrue(yield* held.pipe(FairLock.withLock(key, { wait: "5 seconds" })))
          const token = yield* FairLock.withLock(key, (lease) => Effect.succeed(lease.fencingToken))
          assert.isTrue(token > 0n)
          assert.isTrue(yield* Effect.scoped(Effect.zipRight(FairLock.acquire(key), held)))
          assert.isFalse(yield* held)
        }))

      it.effect("waiters get the lock in the order they came, and tokens follow that order", () =>
        Effect.gen(function*() {
          const key = freshKey("fifo")
          const order: Array<number> = []
          const tokens: Array<bigint> = []
          const go = yield* Deferred.make<void>()
          const holder = yield* Effect.fork(FairLock.withLock(key, Deferred.await(go)))
          yield* Effect.sleep(50)
          const waiters: Array<Fiber.RuntimeFiber<unknown, unknown>> = []
          for (let i = 0; i < 6; i++) {
            waiters.push(
              yield* Effect.fork(
                FairLock.withLock(key, (lease) =>
                  Effect.zipRight(
                    Effect.sleep(5),
                    Effect.sync(() => {
                      order.push(i)
                      tokens.push(lease.fencingToken)
                    })
                  ))
              )
            )
            yield* Effect.sleep(30)
          }
          yield* Deferred.succeed(go, void 0)
          yield* Fiber.join(holder)
          for (const waiter of waiters) yield* Fiber.join(waiter)
          assert.deepStrictEqual(order, [0, 1, 2, 3, 4, 5])
          for (let i = 1; i < tokens.length; i++) assert.isTrue((tokens[i] as bigint) > (tokens[i - 1] as bigint))
        }))

      it.effect("local waiters queued behind the first are served by releases, not by their retry schedules", () =>
        Effect.gen(function*() {
          const key = freshKey("served-by-releases")
          const go = yield* Deferred.make<void>()
          const held = yield* Deferred.make<void>()
          const holder = yield* Effect.fork(
            FairLock.withLock(key, Effect.zipRight(Deferred.succeed(held, void 0), Deferred.await(go)))
          )
          yield* Deferred.await(held)
          // A minute between retries, and each waiter arrives once the ones before it wait: the later
          // ones queue behind the first in this process without an attempt of their own. Each must
          // still be told its turn: a new head of the local queue takes its place in the backend's
          // line at once, and the release before it then wakes it.
          const order: Array<number> = []
          const waiters: Array<Fiber.RuntimeFiber<unknown, unknown>> = []
          for (const n of [1, 2, 3, 4]) {
            waiters.push(
              yield* Effect.fork(
                FairLock.withLock(key, Effect.sync(() => order.push(n)), { retry: Schedule.spaced("60 seconds") })
              )
            )
            yield* Effect.sleep(100)
          }
          yield* Deferred.succeed(go, void 0)
          yield* Fiber.join(holder)
          yield* Fiber.joinAll(waiters).pipe(Effect.timeoutFail({
            duration: "20 seconds",
            onTimeout: () => new Error(`only ${order.length} of 4 waiters got in`)
          }))
          assert.deepStrictEqual(order, [1, 2, 3, 4])
        }))

      it.effect("mutual exclusion under contention", () =>
        Effect.gen(function*() {
          const key = freshKey("mutex")
          let counter = 0
          let inside = 0
          let maxInside = 0
          const worker = FairLock.withLock(
            key,
            Effect.gen(function*() {
              inside++
              maxInside = Math.max(maxInside, inside)
              const read = counter
              yield* Effect.sleep(2)
              counter = read + 1
              inside--
            })
          )
          yield* Effect.all(Array.from({ length: 12 }, () => worker), { concurrency: "unbounded" })
          assert.strictEqual(counter, 12)
          assert.strictEqual(maxInside, 1)
        }))

      it.effect("tryAcquire never jumps the line: busy while somebody waits, even with the lock free", () =>
        Effect.gen(function*() {
          const key = freshKey("try")
          const fair = yield* fairPrimitives
          // A foreign holder, and a foreign waiter that queues behind it and then never comes back.
          const holder = { key, owner: "foreign:holder", leaseMillis: 10_000, fencing: true }
          assert.strictEqual((yield* fair.tryAcquire(holder))._tag, "Acquired")
          const waiter = { key, owner: "foreign:waiter", leaseMillis: 10_000, fencing: true, waiting: true }
          assert.strictEqual((yield* fair.tryAcquire(waiter))._tag, "Busy")
          yield* fair.release(key, holder.owner)
          assert.isFalse(yield* Lock.isLocked(key))
          const tried = yield* Effect.scoped(Effect.map(FairLock.tryAcquire(key), Option.isSome))
          assert.isFalse(tried)
          // The dead waiter is dropped after its wait window (5 s): then the line is free.
          const waited = yield* FairLock.withLock(key, Effect.succeed("in"), {
            wait: "20 seconds",
            retry: Schedule.spaced("200 millis")
          })
          assert.strictEqual(waited, "in")
        }))

      it.effect("a waiter that gives up leaves the line: the next one is not held back", () =>
        Effect.gen(function*() {
          const key = freshKey("leave")
          const go = yield* Deferred.make<void>()
          const holder = yield* Effect.fork(FairLock.withLock(key, Deferred.await(go)))
          yield* Effect.sleep(50)
          const quitter = yield* Effect.fork(FairLock.withLock(key, Effect.void))
          yield* Effect.sleep(50)
          const timedOut = yield* Effect.fork(Effect.flip(FairLock.withLock(key, Effect.void, { wait: "100 millis" })))
          yield* Effect.sleep(50)
          const next = yield* Effect.fork(FairLock.withLock(key, Effect.succeed("next")))
          yield* Effect.sleep(150)
          yield* Fiber.interrupt(quitter)
          const timeout = yield* Fiber.join(timedOut)
          assert.strictEqual(timeout._tag, "LockTimeoutError")
          yield* Deferred.succeed(go, void 0)
          // Within a second, far less than the 5 s a forgotten place in line would cost.
          const result = yield* Fiber.join(next).pipe(Effect.timeout("2 seconds"))
          assert.strictEqual(result, "next")
          yield* Fiber.join(holder)
        }))

      it.effect("reentrancy: a nested withLock enters at once with the same token", () =>
        Effect.gen(function*() {
          const key = freshKey("reentrant")
          const [outer, inner] = yield* FairLock.withLock(key, (outer) =>
            FairLock.withLock(key, (inner) => Effect.succeed([outer, inner] as const), { wait: 0 }))
          assert.strictEqual(outer.holdCount, 1)
          assert.strictEqual(inner.holdCount, 2)
          assert.strictEqual(outer.fencingToken, inner.fencingToken)
        }))

      it.effect("the watchdog keeps the lock past its lease; loss interrupts with LockLostError", () =>
        Effect.gen(function*() {
          const key = freshKey("watchdog")
          const result = yield* FairLock.withLock(key, Effect.as(Effect.sleep(800), "done"), { lease: "300 millis" })
          assert.strictEqual(result, "done")
          const held = yield* Deferred.make<void>()
          const victim = yield* Effect.fork(
            FairLock.withLock(key, Effect.zipRight(Deferred.succeed(held, void 0), Effect.never), {
              lease: "600 millis"
            })
          )
          yield* Deferred.await(held)
          yield* Lock.forceUnlock(key)
          const exit = yield* Fiber.await(victim)
          assert.isTrue(Exit.isFailure(exit))
          const error = yield* Effect.flip(exit)
          assert.strictEqual(error._tag, "LockLostError")
        }))

      it.effect("a fair lock and a plain lock on one name exclude each other (one hash, as in Redisson)", () =>
        Effect.gen(function*() {
          const key = freshKey("mixed")
          const inside = yield* FairLock.withLock(key, Lock.withLockIfAvailable(key, Effect.void))
          assert.isTrue(Option.isNone(inside))
        }))
    })
  })
