/**
 * The read-write lock's conformance suite, run over every backend that offers it (memory in
 * test/memory.read-write.test.ts), on the live clock.
 */
import { assert, describe, layer as withLayer } from "@effect/vitest"
import type { Layer } from "effect"
import { Deferred, Effect, Exit, Fiber, Option, Schedule } from "effect"
import { Lock, ReadWriteLock } from "../../src/index.js"
import { LockBackend } from "../../src/index.js"
import { backendOf } from "../../src/internal/backend/make.js"

let keySeq = 0
const freshKey = (label: string) => `rw:${label}:${process.pid}:${Date.now()}:${++keySeq}`

export const runReadWriteConformance = (name: string, layer: Layer.Layer<LockBackend, unknown>) =>
  describe(`read-write lock conformance: ${name}`, () => {
    withLayer(layer, { timeout: 60_000, excludeTestServices: true })((it) => {
      it.effect("all the forms lock", () =>
        Effect.gen(function*() {
          const key = freshKey("forms")
          assert.strictEqual(yield* ReadWriteLock.withReadLock(key, Effect.succeed(1)), 1)
          assert.strictEqual(yield* ReadWriteLock.withWriteLock(key, Effect.succeed(2), { wait: "5 seconds" }), 2)
          assert.strictEqual(yield* Effect.succeed(3).pipe(ReadWriteLock.withReadLock(key, { wait: "5 seconds" })), 3)
          assert.strictEqual(yield* Effect.succeed(4).pipe(ReadWriteLock.withWriteLock(key)), 4)
          const token = yield* ReadWriteLock.withWriteLock(key, (lease) => Effect.succeed(lease.fencingToken))
          assert.isTrue(token > 0n)
          yield* Effect.scoped(Effect.zipRight(ReadWriteLock.acquireRead(key), ReadWriteLock.acquireRead(key)))
          yield* Effect.scoped(ReadWriteLock.acquireWrite(key))
        }))

      it.effect("readers share; a writer excludes readers and writers", () =>
        Effect.gen(function*() {
          const key = freshKey("share")
          let readers = 0
          let writers = 0
          let maxReaders = 0
          const violations: Array<string> = []
          const reader = ReadWriteLock.withReadLock(
            key,
            Effect.gen(function*() {
              readers++
              maxReaders = Math.max(maxReaders, readers)
              if (writers > 0) violations.push("reader with a writer")
              yield* Effect.sleep(20)
              readers--
            })
          )
          const writer = ReadWriteLock.withWriteLock(
            key,
            Effect.gen(function*() {
              writers++
              if (writers > 1 || readers > 0) violations.push(`writer with ${readers} readers, ${writers} writers`)
              yield* Effect.sleep(5)
              writers--
            })
          )
          yield* Effect.all([reader, reader, reader, writer, reader, writer, reader, reader], {
            concurrency: "unbounded"
          })
          assert.deepStrictEqual(violations, [])
          assert.isAbove(maxReaders, 1, "readers overlapped")
        }))

      it.effect("tryAcquire: a read is refused under a write, a write under a read", () =>
        Effect.gen(function*() {
          const key = freshKey("try")
          const go = yield* Deferred.make<void>()
          const held = yield* Deferred.make<void>()
          const writer = yield* Effect.fork(
            ReadWriteLock.withWriteLock(key, Effect.zipRight(Deferred.succeed(held, void 0), Deferred.await(go)))
          )
          yield* Deferred.await(held)
          assert.isTrue(Option.isNone(yield* Effect.scoped(ReadWriteLock.tryAcquireRead(key))))
          yield* Deferred.succeed(go, void 0)
          yield* Fiber.join(writer)
          const go2 = yield* Deferred.make<void>()
          const held2 = yield* Deferred.make<void>()
          const reader = yield* Effect.fork(
            ReadWriteLock.withReadLock(key, Effect.zipRight(Deferred.succeed(held2, void 0), Deferred.await(go2)))
          )
          yield* Deferred.await(held2)
          const reading = yield* Effect.scoped(ReadWriteLock.tryAcquireWrite(key))
          yield* Deferred.succeed(go2, void 0)
          yield* Fiber.join(reader)
          assert.isTrue(Option.isNone(reading))
        }))

      it.effect("reentrant reads and writes; a writer may read (downgrade)", () =>
        Effect.gen(function*() {
          const key = freshKey("reentrant")
          const [outer, inner] = yield* ReadWriteLock.withWriteLock(key, (outer) =>
            ReadWriteLock.withWriteLock(key, (inner) => Effect.succeed([outer, inner] as const), { wait: 0 }))
          assert.strictEqual(inner.holdCount, 2)
          assert.strictEqual(outer.fencingToken, inner.fencingToken)
          const downgraded = yield* ReadWriteLock.withWriteLock(key, (write) =>
            ReadWriteLock.withReadLock(key, (read) =>
              Effect.succeed(read.owner === write.owner), { wait: 0 }))
          assert.isTrue(downgraded)
          const reread = yield* ReadWriteLock.withReadLock(key, () =>
            ReadWriteLock.withReadLock(key, (inner) =>
              Effect.succeed(inner.holdCount), { wait: 0 }))
          assert.strictEqual(reread, 2)
        }))

      it.effect("a reader asking for the write lock fails at once with LockUpgradeError", () =>
        Effect.gen(function*() {
          const key = freshKey("upgrade")
          const error = yield* Effect.flip(
            ReadWriteLock.withReadLock(key, ReadWriteLock.withWriteLock(key, Effect.void))
          )
          assert.strictEqual(error._tag, "LockUpgradeError")
          const scoped = yield* Effect.flip(Effect.scoped(
            Effect.zipRight(ReadWriteLock.acquireRead(key), ReadWriteLock.acquireWrite(key))
          ))
          assert.strictEqual(scoped._tag, "LockUpgradeError")
        }))

      it.effect("a waiting writer goes before readers that come after it", () =>
        Effect.gen(function*() {
          const key = freshKey("writer-first")
          const order: Array<string> = []
          const go = yield* Deferred.make<void>()
          const held = yield* Deferred.make<void>()
          const first = yield* Effect.fork(
            ReadWriteLock.withReadLock(key, Effect.zipRight(Deferred.succeed(held, void 0), Deferred.await(go)))
          )
          yield* Deferred.await(held)
          const writer = yield* Effect.fork(ReadWriteLock.withWriteLock(key, Effect.sync(() => order.push("writer"))))
          yield* Effect.sleep(100)
          const late = yield* Effect.fork(ReadWriteLock.withReadLock(key, Effect.sync(() => order.push("late reader"))))
          yield* Effect.sleep(100)
          assert.deepStrictEqual(order, [], "the late reader waits behind the writer")
          yield* Deferred.succeed(go, void 0)
          yield* Fiber.join(first)
          yield* Fiber.join(writer)
          yield* Fiber.join(late)
          assert.deepStrictEqual(order, ["writer", "late reader"])
        }))

      it.effect("a writer that stops waiting no longer holds readers back, and leaves nothing behind", () =>
        Effect.gen(function*() {
          const key = freshKey("writer-gives-up")
          const go = yield* Deferred.make<void>()
          const held = yield* Deferred.make<void>()
          const first = yield* Effect.fork(
            ReadWriteLock.withReadLock(key, Effect.zipRight(Deferred.succeed(held, void 0), Deferred.await(go)))
          )
          yield* Deferred.await(held)
          const timedOut = yield* Effect.flip(ReadWriteLock.withWriteLock(key, Effect.void, { wait: "300 millis" }))
          assert.strictEqual(timedOut._tag, "LockTimeoutError")
          const interrupted = yield* Effect.fork(ReadWriteLock.withWriteLock(key, Effect.void))
          yield* Effect.sleep(200)
          yield* Fiber.interrupt(interrupted)
          // Neither waiting writer's mark is left to keep a new reader out.
          const late = yield* Effect.scoped(ReadWriteLock.tryAcquireRead(key))
          assert.isTrue(Option.isSome(late), "a new reader gets in beside the first")
          yield* Deferred.succeed(go, void 0)
          yield* Fiber.join(first)
          assert.isTrue(Option.isSome(yield* Effect.scoped(ReadWriteLock.tryAcquireWrite(key))), "free again")
        }))

      it.effect("readers waiting behind a writer all get in together when it leaves", () =>
        Effect.gen(function*() {
          const key = freshKey("readers-together")
          const go = yield* Deferred.make<void>()
          const held = yield* Deferred.make<void>()
          const writer = yield* Effect.fork(
            ReadWriteLock.withWriteLock(key, Effect.zipRight(Deferred.succeed(held, void 0), Deferred.await(go)))
          )
          yield* Deferred.await(held)
          // Each reader stays inside until all five are: only readers woken together can finish. Their
          // retry schedule alone would take a minute, so one release notification must reach them all.
          let inside = 0
          const all = yield* Deferred.make<void>()
          const reader = ReadWriteLock.withReadLock(
            key,
            Effect.suspend(() => {
              if (++inside === 5) return Deferred.succeed(all, void 0)
              return Deferred.await(all)
            }),
            { retry: Schedule.spaced("60 seconds") }
          )
          const readers = yield* Effect.fork(Effect.all(Array.from({ length: 5 }, () => reader), { concurrency: 5 }))
          yield* Effect.sleep(200)
          yield* Deferred.succeed(go, void 0)
          yield* Fiber.join(writer)
          yield* Fiber.join(readers).pipe(Effect.timeoutFail({
            duration: "20 seconds",
            onTimeout: () => new Error(`only ${inside} of 5 readers got in`)
          }))
          assert.strictEqual(inside, 5)
        }))

      it.effect("each reader's lease is its own: the watchdog keeps it, loss interrupts only that reader", () =>
        Effect.gen(function*() {
          const key = freshKey("watchdog")
          const result = yield* ReadWriteLock.withReadLock(key, Effect.as(Effect.sleep(800), "done"), {
            lease: "300 millis"
          })
          assert.strictEqual(result, "done")
          const lost = yield* Effect.flip(
            ReadWriteLock.withReadLock(key, Effect.sleep(5_000), { lease: "300 millis", renew: false })
          )
          assert.strictEqual(lost._tag, "LockLostError")
        }))

      it.effect("a reader that stops renewing loses its lease alone, while the others renew theirs", () =>
        Effect.gen(function*() {
          const key = freshKey("reader-lost-alone")
          // A reader whose process died: it took the read lock (300 ms lease) and never renews it.
          const read = backendOf(yield* LockBackend).kinds.read
          if (read === undefined) return yield* Effect.dieMessage("no read kind")
          const stalled = yield* read.primitives.tryAcquire({
            key,
            owner: "stalled-reader",
            leaseMillis: 300,
            fencing: true
          })
          assert.strictEqual(stalled._tag, "Acquired")
          // A live reader next to it, renewed by its watchdog for a second (its renewals must not
          // keep the stalled reader's lease alive, as Redisson's older renewal did).
          assert.strictEqual(
            yield* ReadWriteLock.withReadLock(key, Effect.as(Effect.sleep(1_000), "kept"), { lease: "300 millis" }),
            "kept"
          )
          // The stalled reader's lease ended long ago: a writer gets in at once.
          assert.isTrue(Option.isSome(yield* Effect.scoped(ReadWriteLock.tryAcquireWrite(key))))
        }))

      it.effect("a plain lock and a read-write lock on one name: a typed error, not a silent share", () =>
        Effect.gen(function*() {
          const key = freshKey("mixed")
          const exit = yield* Effect.exit(ReadWriteLock.withReadLock(key, Lock.withLock(key, Effect.void)))
          assert.isTrue(Exit.isFailure(exit))
          const error = yield* Effect.flip(exit)
          assert.strictEqual(error._tag, "LockBackendError")
          const other = yield* Effect.flip(Lock.withLock(key, ReadWriteLock.withWriteLock(key, Effect.void)))
          assert.strictEqual(other._tag, "LockBackendError")
        }))
    })
  })
