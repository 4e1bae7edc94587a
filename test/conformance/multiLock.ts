/**
 * MultiLock's conformance suite, written once and run over every backend (Memory in
 * test/memory.multiLock.test.ts, Redis in test/redis/multiLock.test.ts), on the live clock.
 */
import { assert, describe, layer as withLayer } from "@effect/vitest"
import type { Layer } from "effect"
import { Effect, Fiber, Metric, Option, Random } from "effect"
import { Lock, LockBackend, LockMetrics, MultiLock, withLock } from "../../src/index.js"

let keySeq = 0
const freshKeys = (label: string, n: number) => {
  const base = `multi:${label}:${process.pid}:${Date.now()}:${++keySeq}`
  return Array.from({ length: n }, (_, i) => `${base}:${String.fromCharCode(97 + i)}`)
}

/** Occupy `key` as a foreign client (nobody renews nor releases it) for `leaseMillis`. */
const occupy = (key: string, leaseMillis: number) =>
  Effect.flatMap(LockBackend, (backend) =>
    Effect.flatMap(
      backend.primitives.tryAcquire({ key, owner: "foreign-client:1", leaseMillis, fencing: true }),
      (result) => result._tag === "Acquired" ? Effect.void : Effect.dieMessage(`${key} was busy`)
    ))

const lockedOf = (keys: ReadonlyArray<string>) => Effect.all(keys.map((key) => Lock.isLocked(key)))

/** Multi-locks this process took in one all-or-nothing step on the backend provided. */
const takenTogether = Effect.flatMap(
  LockBackend,
  (backend) =>
    Effect.map(
      Metric.value(LockMetrics.multiLockTogether.pipe(Metric.tagged("backend", backend.name))),
      (state) => state.count
    )
)

/**
 * `together`: whether this backend takes the suite's keys (no hash tags) in one step, as memory and
 * one Redis server do; on a cluster they lie in different slots and are taken one by one.
 */
export const runMultiLockConformance = (
  name: string,
  layer: Layer.Layer<LockBackend, unknown>,
  options: { readonly together: boolean } = { together: true }
) =>
  describe(`multi-lock conformance: ${name}`, () => {
    withLayer(layer, { timeout: 60_000, excludeTestServices: true })((it) => {
      it.effect(
        options.together
          ? "free keys are taken together, in one all-or-nothing step; held keys reenter; a busy key falls back to waiting in order"
          : "keys in different slots are taken one by one, never in one step",
        () =>
          Effect.gen(function*() {
            const [a, b, c] = freshKeys("together", 3) as [string, string, string]
            const step = options.together ? 1 : 0
            const start = yield* takenTogether
            const lease = yield* MultiLock.withLocks([a, b, c], (lease) => Effect.as(lockedOf([a, b, c]), lease))
            assert.strictEqual(yield* takenTogether, start + step)
            assert.deepStrictEqual(lease.leases.map((l) => l.fencingToken > 0n), [true, true, true])
            // Held by the region: a reentry (same token); the other two are taken together.
            const inner = yield* withLock(
              a,
              (outer) =>
                MultiLock.withLocks(
                  [a, b, c],
                  (multi) =>
                    Effect.succeed({ outer: outer.fencingToken, multi: multi.leases.map((l) => l.fencingToken) })
                )
            )
            assert.strictEqual(inner.multi[0], inner.outer)
            assert.isTrue((inner.multi[1] ?? 0n) > (lease.leases[1]?.fencingToken ?? 0n))
            assert.strictEqual(yield* takenTogether, start + 2 * step)
            // A busy key: nothing is taken in that step, and the wait goes on key by key.
            yield* occupy(b, 300)
            const inside = yield* MultiLock.withLocks([a, b, c], lockedOf([a, b, c]), { wait: "10 seconds" })
            assert.deepStrictEqual(inside, [true, true, true])
            assert.strictEqual(yield* takenTogether, start + 2 * step)
            assert.deepStrictEqual(yield* lockedOf([a, b, c]), [false, false, false])
            // One attempt at busy keys takes none of them.
            yield* occupy(c, 5_000)
            assert.isTrue(Option.isNone(yield* MultiLock.withLocksIfAvailable([a, b, c], Effect.void)))
            assert.deepStrictEqual(yield* lockedOf([a, b]), [false, false])
          })
      )

      it.effect("withLocks holds every key while the program runs and releases them all", () =>
        Effect.gen(function*() {
          const keys = freshKeys("basic", 3)
          const inside = yield* MultiLock.withLocks(keys, lockedOf(keys))
          assert.deepStrictEqual(inside, [true, true, true])
          assert.deepStrictEqual(yield* lockedOf(keys), [false, false, false])
        }))

      it.effect("the call forms and the lease-function form; keys sorted, duplicates dropped", () =>
        Effect.gen(function*() {
          const [a, b, c] = freshKeys("forms", 3) as [string, string, string]
          const held = lockedOf([a, b, c])
          assert.deepStrictEqual(yield* Effect.scoped(MultiLock.withLocks([c, a], held)), [true, false, true])
          assert.deepStrictEqual(yield* held.pipe(MultiLock.withLocks([b, a, b], { wait: "5 seconds" })), [
            true,
            true,
            false
          ])
          const lease = yield* MultiLock.withLocks([c, b, a, c], (lease) => Effect.succeed(lease))
          assert.deepStrictEqual(lease.keys, [a, b, c])
          assert.deepStrictEqual(lease.leases.map((l) => l.key), [a, b, c])
          for (const l of lease.leases) assert.isTrue(l.fencingToken > 0n)
          assert.deepStrictEqual(yield* held, [false, false, false])
        }))

      it.effect("all or none: a busy key leaves nothing held (one attempt, and a wait that runs out)", () =>
        Effect.gen(function*() {
          const [a, b, c] = freshKeys("none", 3) as [string, string, string]
          yield* occupy(b, 5_000)
          assert.isTrue(Option.isNone(yield* MultiLock.withLocksIfAvailable([a, b, c], Effect.void)))
          assert.deepStrictEqual(yield* lockedOf([a, c]), [false, false])
          assert.isTrue(Option.isNone(yield* Effect.scoped(MultiLock.tryAcquire([a, b, c]))))
          assert.deepStrictEqual(yield* lockedOf([a, c]), [false, false])
          const error = yield* Effect.flip(MultiLock.withLocks([a, b, c], Effect.void, { wait: "100 millis" }))
          assert.strictEqual(error._tag, "LockTimeoutError")
          if (error._tag === "LockTimeoutError") assert.strictEqual(error.key, b)
          assert.deepStrictEqual(yield* lockedOf([a, c]), [false, false])
          const scoped = yield* Effect.flip(Effect.scoped(MultiLock.acquire([a, b, c], { wait: "100 millis" })))
          assert.strictEqual(scoped._tag, "LockTimeoutError")
          assert.deepStrictEqual(yield* lockedOf([a, c]), [false, false])
        }))

      it.effect("crossing multi-locks over overlapping keys never deadlock, and exclude each other per key", () =>
        Effect.gen(function*() {
          const keys = freshKeys("cross", 5)
          const inside = new Map<string, number>()
          let violations = 0
          let done = 0
          const job = Effect.gen(function*() {
            const picked: Array<string> = []
            for (const key of keys) if (yield* Random.nextBoolean) picked.push(key)
            if (picked.length === 0) picked.push(keys[0] as string)
            // Reversed on purpose: the order a caller passes must not matter.
            picked.reverse()
            yield* MultiLock.withLocks(
              picked,
              Effect.gen(function*() {
                for (const key of picked) {
                  const n = (inside.get(key) ?? 0) + 1
                  inside.set(key, n)
                  if (n > 1) violations++
                }
                yield* Effect.sleep(2)
                for (const key of picked) inside.set(key, (inside.get(key) ?? 1) - 1)
                done++
              }),
              { lease: "5 seconds" }
            )
          })
          yield* Effect.all(Array.from({ length: 30 }, () => job), { concurrency: "unbounded" }).pipe(
            Effect.timeoutFail({ duration: "30 seconds", onTimeout: () => new Error("deadlock: not done in 30 s") })
          )
          assert.strictEqual(done, 30)
          assert.strictEqual(violations, 0)
        }))

      it.effect("losing one key interrupts the program with that key's LockLostError and releases the rest", () =>
        Effect.gen(function*() {
          const [a, b, c] = freshKeys("lost", 3) as [string, string, string]
          const error = yield* Effect.flip(
            MultiLock.withLocks([a, b, c], Effect.zipRight(Lock.forceUnlock(b), Effect.never), { lease: "300 millis" })
          )
          assert.strictEqual(error._tag, "LockLostError")
          if (error._tag === "LockLostError") assert.strictEqual(error.key, b)
          assert.deepStrictEqual(yield* lockedOf([a, b, c]), [false, false, false])
        }))

      it.effect("reentrancy composes with the mutex: a key the region holds is not taken twice", () =>
        Effect.gen(function*() {
          const [a, b] = freshKeys("reenter", 2) as [string, string]
          const result = yield* withLock(
            a,
            (outer) =>
              MultiLock.withLocks([a, b], (multi) =>
                Effect.gen(function*() {
                  const lease = multi.leases[0]
                  assert.strictEqual(lease?.fencingToken, outer.fencingToken)
                  assert.strictEqual(lease?.holdCount, 2)
                  return Option.isSome(yield* Lock.currentLease(b))
                }))
          )
          assert.isTrue(result)
          assert.deepStrictEqual(yield* lockedOf([a, b]), [false, false])
        }))

      it.effect("acquire holds every key until the scope closes", () =>
        Effect.gen(function*() {
          const keys = freshKeys("scoped", 3)
          yield* Effect.scoped(Effect.gen(function*() {
            const lease = yield* MultiLock.acquire(keys)
            assert.isTrue(yield* lease.isHeld)
            assert.deepStrictEqual(yield* lockedOf(keys), [true, true, true])
            assert.strictEqual(yield* lease.guard(Effect.succeed(1)), 1)
          }))
          assert.deepStrictEqual(yield* lockedOf(keys), [false, false, false])
        }))

      it.effect("interrupting a waiting multi-lock leaves nothing behind", () =>
        Effect.gen(function*() {
          const [a, b] = freshKeys("interrupt", 2) as [string, string]
          yield* occupy(b, 5_000)
          const waiter = yield* Effect.fork(MultiLock.withLocks([a, b], Effect.void))
          yield* Effect.sleep(100)
          assert.isTrue(yield* Lock.isLocked(a), "the first key is held while the second is awaited")
          yield* Fiber.interrupt(waiter)
          assert.isFalse(yield* Lock.isLocked(a))
        }))

      it.effect("bad input is a LockOptionsError and takes nothing", () =>
        Effect.gen(function*() {
          const [a] = freshKeys("bad", 1) as [string]
          const errors = yield* Effect.all([
            Effect.flip(MultiLock.withLocks([], Effect.void)),
            Effect.flip(MultiLock.withLocks([a, ""], Effect.void)),
            Effect.flip(MultiLock.withLocks([a], Effect.void, { lease: 0 }))
          ])
          for (const error of errors) assert.strictEqual(error._tag, "LockOptionsError")
          assert.isFalse(yield* Lock.isLocked(a))
        }))
    })
  })
