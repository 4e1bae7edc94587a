/**
 * One focused test per rule of DESIGN §2 that applies to one process, on the memory backend under
 * TestClock. Each would fail if its rule were broken.
 */
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Exit, Fiber, Metric, Option, Schedule, Scope, TestClock } from "effect"
import type { LockBackend } from "../src/index.js"
import { Lock, LockOptionsError, withLock } from "../src/index.js"
import * as metrics from "../src/internal/metrics.js"
import type { Instrumented } from "./support/instrumented.js"
import { makeInstrumented } from "./support/instrumented.js"

/** Let forked fibers run up to their next suspension. */
const settle = Effect.repeatN(Effect.yieldNow(), 50)

/** A foreign owner takes the key directly in the backend (no watchdog, never released). */
const occupy = (t: Instrumented, key: string, leaseMillis: number) =>
  t.inner.tryAcquire({ key, owner: "foreign:1", leaseMillis, fencing: true })

const activeWatchdogs = Effect.map(
  Metric.value(Metric.tagged(metrics.held, "backend", "memory")),
  (state) => state.value
)

describe("acquire and wait (§2.1)", () => {
  it.scoped("a free lock costs exactly one backend attempt", () =>
    Effect.gen(function*() {
      const t = yield* makeInstrumented
      yield* withLock("k", Effect.void).pipe(Effect.provide(t.layer))
      assert.strictEqual(t.calls.tryAcquire, 1)
      assert.strictEqual(t.calls.subscribe, 0)
      assert.strictEqual(t.calls.release, 1)
    }))

  it.scoped("a release notification wakes the waiter without any time passing", () =>
    Effect.gen(function*() {
      const t = yield* makeInstrumented
      const release = yield* Deferred.make<void>()
      const holder = yield* Effect.fork(withLock("k", Deferred.await(release)).pipe(Effect.provide(t.layer)))
      yield* settle
      const waiter = yield* Effect.fork(
        withLock("k", Effect.succeed("in"), { retry: Schedule.spaced("1 hour") }).pipe(Effect.provide(t.layer))
      )
      yield* settle
      assert.isTrue(Option.isNone(yield* Fiber.poll(waiter)))
      yield* Deferred.succeed(release, void 0)
      yield* Fiber.join(holder)
      yield* settle
      const result = yield* Fiber.poll(waiter)
      assert.deepStrictEqual(Option.map(result, Exit.isSuccess), Option.some(true))
    }))

  it.scoped("local waiters are served first in, first out: each release hands the lock to the next waiter, with no attempt of its own", () =>
    Effect.gen(function*() {
      const t = yield* makeInstrumented
      const order: Array<number> = []
      const tokens: Array<bigint> = []
      const handOversBefore = (yield* Metric.value(Metric.tagged(metrics.handOvers, "backend", "memory"))).count
      const gates = [0, 1, 2, 3].map(() => Effect.runSync(Deferred.make<void>()))
      const holder = (i: number) =>
        withLock("k", (lease) =>
          Effect.zipRight(
            Effect.sync(() => {
              order.push(i)
              tokens.push(lease.fencingToken)
            }),
            Deferred.await(gates[i]!)
          ), {
          retry: Schedule.spaced("1 hour")
        }).pipe(Effect.provide(t.layer))
      const fibers = [yield* Effect.fork(holder(0))]
      yield* settle
      for (const i of [1, 2, 3]) {
        fibers.push(yield* Effect.fork(holder(i)))
        yield* settle
      }
      for (const i of [0, 1, 2]) {
        const attemptsBefore = t.calls.tryAcquire
        yield* Deferred.succeed(gates[i]!, void 0)
        yield* settle
        assert.deepStrictEqual(order, [0, 1, 2, 3].slice(0, i + 2), "the release handed the lock to the next waiter")
        assert.strictEqual(t.calls.tryAcquire - attemptsBefore, 0, "the receiver made no attempt")
      }
      yield* Deferred.succeed(gates[3]!, void 0)
      yield* Effect.forEach(fibers, Fiber.join)
      assert.deepStrictEqual(order, [0, 1, 2, 3])
      assert.deepStrictEqual(tokens, [1n, 2n, 3n, 4n], "every hand-over draws the next fencing token")
      assert.strictEqual(
        (yield* Metric.value(Metric.tagged(metrics.handOvers, "backend", "memory"))).count - handOversBefore,
        3
      )
      assert.strictEqual(yield* t.backend.lockCount, 0)
    }))

  it.scoped("a release notification wakes one waiter, not the herd", () =>
    Effect.gen(function*() {
      const t = yield* makeInstrumented
      yield* occupy(t, "k", 3_600_000)
      const fibers: Array<Fiber.RuntimeFiber<void, unknown>> = []
      for (let i = 0; i < 3; i++) {
        fibers.push(
          yield* Effect.fork(
            withLock("k", Effect.void, { retry: Schedule.spaced("1 hour") }).pipe(Effect.provide(t.layer))
          )
        )
        yield* settle
      }
      const attemptsBefore = t.calls.tryAcquire
      // A force-unlock notifies; it does not hand over.
      yield* t.backend.primitives.forceRelease("k")
      yield* settle
      assert.strictEqual(t.calls.tryAcquire - attemptsBefore, 1, "one notification, one woken waiter, one attempt")
      yield* Effect.forEach(fibers, Fiber.join)
    }))

  it.scoped("a newcomer queues behind local waiters without trying the lock", () =>
    Effect.gen(function*() {
      const t = yield* makeInstrumented
      yield* occupy(t, "k", 3_600_000)
      const first = yield* Effect.fork(withLock("k", Effect.void).pipe(Effect.provide(t.layer)))
      yield* settle
      assert.strictEqual(t.calls.tryAcquire, 2, "the first waiter's attempt and its retry after subscribing")
      const second = yield* Effect.fork(withLock("k", Effect.void).pipe(Effect.provide(t.layer)))
      yield* settle
      assert.strictEqual(t.calls.tryAcquire, 2, "the second waiter made no attempt")
      assert.strictEqual((yield* t.backend.waiters).fibers, 2)
      assert.strictEqual(t.calls.subscribe, 1, "one subscription for the key, however many wait")
      yield* Fiber.interrupt(first)
      yield* Fiber.interrupt(second)
    }))

  it.scoped("only the head of the local queue retries on its schedule", () =>
    Effect.gen(function*() {
      const t = yield* makeInstrumented
      yield* occupy(t, "k", 3_600_000)
      const waiter = () =>
        Effect.fork(withLock("k", Effect.void, { retry: Schedule.spaced("100 millis") }).pipe(Effect.provide(t.layer)))
      const head = yield* waiter()
      yield* settle
      const others = [yield* waiter(), yield* waiter()]
      yield* settle
      const before = t.calls.tryAcquire
      yield* TestClock.adjust(1_000)
      yield* settle
      assert.strictEqual(t.calls.tryAcquire - before, 10, "ten attempts in a second: the head's, nobody else's")
      // The head leaves: the next waiter takes over the clock.
      yield* Fiber.interrupt(head)
      yield* settle
      const after = t.calls.tryAcquire
      yield* TestClock.adjust(1_000)
      yield* settle
      assert.strictEqual(t.calls.tryAcquire - after, 10, "the new head retries on its own schedule")
      yield* Effect.forEach(others, Fiber.interrupt)
    }))

  it.scoped("with notifications lost, every waiter still gets in, one after the other", () =>
    Effect.gen(function*() {
      const t = yield* makeInstrumented
      t.dropNotifications = true
      const entered: Array<number> = []
      const fibers = yield* Effect.forEach([0, 1, 2, 3], (i) =>
        Effect.fork(
          withLock("k", Effect.zipRight(Effect.sync(() => entered.push(i)), Effect.sleep(50)), {
            retry: Schedule.spaced("200 millis")
          }).pipe(Effect.provide(t.layer))
        ).pipe(Effect.zipLeft(settle)))
      for (let i = 0; i < 20; i++) {
        yield* TestClock.adjust(100)
        yield* settle
      }
      yield* Effect.forEach(fibers, Fiber.join)
      assert.deepStrictEqual(entered, [0, 1, 2, 3])
    }))

  it.scoped("a waiter wakes when the holder's lease ends, not later", () =>
    Effect.gen(function*() {
      const t = yield* makeInstrumented
      yield* occupy(t, "k", 5_000)
      const waiter = yield* Effect.fork(
        withLock("k", Effect.succeed("in"), { retry: Schedule.spaced("1 hour") }).pipe(Effect.provide(t.layer))
      )
      yield* settle
      yield* TestClock.adjust(4_999)
      yield* settle
      assert.isTrue(Option.isNone(yield* Fiber.poll(waiter)), "still waiting before the lease ends")
      yield* TestClock.adjust(2)
      yield* settle
      assert.isTrue(Option.isSome(yield* Fiber.poll(waiter)), "in right after the lease ends")
    }))

  it.scoped("between wake-ups the retry schedule drives the attempts", () =>
    Effect.gen(function*() {
      const t = yield* makeInstrumented
      yield* occupy(t, "k", 3_600_000)
      const waiter = yield* Effect.fork(
        withLock("k", Effect.void, { retry: Schedule.spaced("100 millis") }).pipe(Effect.provide(t.layer))
      )
      yield* settle
      const before = t.calls.tryAcquire
      yield* TestClock.adjust(1_000)
      yield* settle
      assert.strictEqual(t.calls.tryAcquire - before, 10)
      yield* Fiber.interrupt(waiter)
    }))

  it.scoped("wait runs out at exactly the budget with LockTimeoutError", () =>
    Effect.gen(function*() {
      const t = yield* makeInstrumented
      yield* occupy(t, "k", 3_600_000)
      const waiter = yield* Effect.fork(
        Effect.flip(withLock("k", Effect.void, { wait: "2 seconds" })).pipe(Effect.provide(t.layer))
      )
      yield* settle
      yield* TestClock.adjust(1_999)
      yield* settle
      assert.isTrue(Option.isNone(yield* Fiber.poll(waiter)))
      yield* TestClock.adjust(1)
      const error = yield* Fiber.join(waiter)
      assert.strictEqual(error._tag, "LockTimeoutError")
      if (error._tag === "LockTimeoutError") {
        assert.strictEqual(error.waitedMillis, 2_000)
        assert.strictEqual(error.reason, "wait-elapsed")
      }
    }))

  it.scoped("interrupting a waiter leaves no lock, no waiter and no watchdog", () =>
    Effect.gen(function*() {
      const t = yield* makeInstrumented
      yield* occupy(t, "k", 1_000)
      const waiter = yield* Effect.fork(withLock("k", Effect.never).pipe(Effect.provide(t.layer)))
      yield* settle
      assert.strictEqual((yield* t.backend.waiters).fibers, 1)
      yield* Fiber.interrupt(waiter)
      assert.deepStrictEqual(yield* t.backend.waiters, { fibers: 0, keys: [] })
      yield* TestClock.adjust(2_000)
      yield* settle
      assert.strictEqual(yield* t.backend.lockCount, 0)
      assert.strictEqual(yield* activeWatchdogs, 0)
    }))
})

describe("reentrancy and owners (§2.2)", () => {
  it.scoped("a nested withLock on a held key makes no backend call", () =>
    Effect.gen(function*() {
      const t = yield* makeInstrumented
      const counts = yield* withLock("k", () =>
        Effect.gen(function*() {
          const before = { ...t.calls }
          const inner = yield* withLock("k", withLock("k", (lease) => Effect.succeed(lease.holdCount)))
          return { before, after: { ...t.calls }, inner }
        })).pipe(Effect.provide(t.layer))
      assert.deepStrictEqual(counts.after, counts.before)
      assert.strictEqual(counts.inner, 3)
      assert.strictEqual(t.calls.release, 1, "one release, when the outermost hold ends")
    }))

  it.scoped("two fibers without a shared owner exclude each other in one process", () =>
    Effect.gen(function*() {
      const t = yield* makeInstrumented
      const first = yield* Effect.fork(withLock("k", Effect.sleep(1_000)).pipe(Effect.provide(t.layer)))
      yield* settle
      const second = yield* Effect.flip(withLock("k", Effect.void, { wait: 0 })).pipe(Effect.provide(t.layer))
      assert.strictEqual(second._tag, "LockTimeoutError")
      yield* TestClock.adjust(1_000)
      yield* Fiber.join(first)
    }))

  it.scoped("FiberRef fork: fibers the program forks inherit its owner and reenter", () =>
    Effect.gen(function*() {
      const t = yield* makeInstrumented
      const [outer, child] = yield* withLock("k", (lease) =>
        Effect.gen(function*() {
          const fiber = yield* Effect.fork(Effect.flatMap(Lock.currentLease("k"), (current) => Effect.succeed(current)))
          return [lease, yield* Fiber.join(fiber)] as const
        })).pipe(Effect.provide(t.layer))
      assert.isTrue(Option.isSome(child))
      assert.strictEqual(Option.getOrThrow(child).owner, outer.owner)
    }))

  it.scoped("a child that acquired into the parent's scope is joined back: the parent sees and reenters the hold", () =>
    Effect.gen(function*() {
      const t = yield* makeInstrumented
      const scope = yield* Scope.make()
      const child = yield* Effect.fork(Lock.acquire("k").pipe(Scope.extend(scope), Effect.provide(t.layer)))
      const lease = yield* Fiber.join(child)
      assert.strictEqual(lease.holdCount, 1)
      const seen = yield* Lock.currentLease("k")
      assert.strictEqual(Option.getOrThrow(seen).owner, lease.owner)
      const attempts = t.calls.tryAcquire
      const inner = yield* withLock("k", (inner) => Effect.succeed(inner), { wait: 0 }).pipe(Effect.provide(t.layer))
      assert.strictEqual(inner.owner, lease.owner)
      assert.strictEqual(t.calls.tryAcquire, attempts, "the reentry made no backend call")
      yield* Scope.close(scope, Exit.void)
      assert.strictEqual(yield* t.backend.lockCount, 0)
      assert.isTrue(Option.isNone(yield* Lock.currentLease("k")))
    }))

  it.scoped("holds acquired concurrently into one scope belong to that scope", () =>
    Effect.gen(function*() {
      const t = yield* makeInstrumented
      const [a, b] = yield* Effect.scoped(
        Effect.gen(function*() {
          yield* Effect.all([Lock.acquire("a"), Lock.acquire("b")], { concurrency: 2 })
          const a = yield* Lock.currentLease("a")
          const b = yield* Lock.currentLease("b")
          const nested = yield* withLock("a", withLock("b", Effect.succeed("in")), { wait: 0 })
          assert.strictEqual(nested, "in")
          return [a, b] as const
        })
      ).pipe(Effect.provide(t.layer))
      assert.isTrue(Option.isSome(a))
      assert.isTrue(Option.isSome(b))
      assert.strictEqual(t.calls.tryAcquire, 2, "the nested withLocks reentered")
      assert.strictEqual(yield* t.backend.lockCount, 0)
    }))

  it.scoped("thousands of holds acquired concurrently into one scope are each reentered once, then all released", () =>
    Effect.gen(function*() {
      const t = yield* makeInstrumented
      const keys = Array.from({ length: 2_000 }, (_, i) => `many:${i}`)
      const scope = yield* Scope.make()
      yield* Effect.forEach(keys, (key) => Lock.acquire(key), { concurrency: 64 }).pipe(
        Scope.extend(scope),
        Effect.provide(t.layer)
      )
      assert.strictEqual(t.calls.tryAcquire, keys.length)
      const counts = yield* Effect.forEach(
        keys,
        (key) => withLock(key, (lease) => Effect.succeed(lease.holdCount), { wait: 0 })
      ).pipe(Effect.provide(t.layer))
      assert.isTrue(counts.every((count) => count === 2), "every key reentered the joined hold")
      assert.strictEqual(t.calls.tryAcquire, keys.length, "the reentries made no backend call")
      yield* Scope.close(scope, Exit.void)
      assert.strictEqual(yield* t.backend.lockCount, 0)
      assert.isTrue(Option.isNone(yield* Lock.currentLease("many:0")))
    }))

  it.scoped("a hold acquired by a grandchild into the scope reaches the grandparent through two joins", () =>
    Effect.gen(function*() {
      const t = yield* makeInstrumented
      const scope = yield* Scope.make()
      yield* Lock.acquire("outer").pipe(Scope.extend(scope), Effect.provide(t.layer))
      const child = yield* Effect.fork(
        Effect.flatMap(Effect.fork(Lock.acquire("deep").pipe(Scope.extend(scope))), Fiber.join).pipe(
          Effect.provide(t.layer)
        )
      )
      const lease = yield* Fiber.join(child)
      assert.strictEqual(Option.getOrThrow(yield* Lock.currentLease("deep")).owner, lease.owner)
      assert.isTrue(Option.isSome(yield* Lock.currentLease("outer")))
      yield* Scope.close(scope, Exit.void)
      assert.isTrue(Option.isNone(yield* Lock.currentLease("deep")))
      assert.strictEqual(yield* t.backend.lockCount, 0)
    }))

  it.scoped("siblings inside another lock's program exclude each other on a key nobody above holds", () =>
    Effect.gen(function*() {
      const t = yield* makeInstrumented
      let inside = 0
      let maxInside = 0
      const owners = new Set<string>()
      const tokens = yield* withLock("batch", () =>
        Effect.all(
          [1, 2, 3].map(() =>
            withLock("acct:1", (lease) =>
              Effect.gen(function*() {
                owners.add(lease.owner)
                inside++
                maxInside = Math.max(maxInside, inside)
                yield* Effect.sleep(10)
                inside--
                return lease.fencingToken
              }))
          ),
          { concurrency: "unbounded" }
        ).pipe(
          Effect.fork,
          Effect.tap(() => Effect.zipRight(settle, TestClock.adjust(100))),
          Effect.flatMap(Fiber.join)
        )).pipe(
          Effect.provide(t.layer)
        )
      assert.strictEqual(maxInside, 1, "never two siblings inside at once")
      assert.strictEqual(owners.size, 3, "each sibling held the key with its own owner id")
      assert.deepStrictEqual([...tokens].sort(), [1n, 2n, 3n], "three fresh acquisitions")
      assert.strictEqual(yield* t.backend.lockCount, 0)
    }))

  it.scoped("a sibling's wait is bounded by wait, even while another sibling acquires the key", () =>
    Effect.gen(function*() {
      const t = yield* makeInstrumented
      yield* occupy(t, "k", 60_000)
      const result = yield* withLock("outer", () =>
        Effect.gen(function*() {
          const slow = yield* Effect.fork(withLock("k", Effect.void))
          yield* settle
          const quick = yield* Effect.flip(withLock("k", Effect.void, { wait: 0 }))
          yield* Fiber.interrupt(slow)
          return quick
        })).pipe(Effect.provide(t.layer))
      assert.strictEqual(result._tag, "LockTimeoutError")
    }))

  it.scoped("reentrancy follows the backend: a hold on one backend never enters another", () =>
    Effect.gen(function*() {
      const a = yield* makeInstrumented
      const b = yield* makeInstrumented
      yield* occupy(b, "k", 60_000)
      const error = yield* withLock("k", () =>
        Effect.flip(withLock("k", Effect.void, { wait: 0 }).pipe(Effect.provide(b.layer))))
        .pipe(Effect.provide(a.layer))
      assert.strictEqual(error._tag, "LockTimeoutError", "k on B is held by someone else: the nested withLock waits")
      assert.strictEqual(b.calls.tryAcquire, 1, "B was asked")
    }))
})

describe("lease and watchdog (§2.3)", () => {
  it.scoped("the watchdog renews every lease/3 and dies with the scope", () =>
    Effect.gen(function*() {
      const t = yield* makeInstrumented
      const fiber = yield* Effect.fork(
        withLock("k", Effect.sleep(10_000), { lease: "3 seconds" }).pipe(Effect.provide(t.layer))
      )
      yield* settle
      assert.strictEqual(yield* activeWatchdogs, 1)
      for (let i = 1; i <= 9; i++) {
        yield* TestClock.adjust(1_000)
        yield* settle
        assert.strictEqual(t.calls.renew, i, `renewal ${i} after ${i} s`)
      }
      yield* TestClock.adjust(1_000)
      yield* Fiber.join(fiber)
      assert.strictEqual(yield* activeWatchdogs, 0)
      const renewals = t.calls.renew
      yield* TestClock.adjust(10_000)
      yield* settle
      assert.strictEqual(t.calls.renew, renewals, "no renewal after the scope closed")
    }))

  it.scoped("a renew period can be set explicitly", () =>
    Effect.gen(function*() {
      const t = yield* makeInstrumented
      const fiber = yield* Effect.fork(
        withLock("k", Effect.sleep(1_000), { lease: "3 seconds", renew: "100 millis" }).pipe(Effect.provide(t.layer))
      )
      yield* settle
      yield* TestClock.adjust(1_000)
      yield* Fiber.join(fiber)
      assert.strictEqual(t.calls.renew, 10)
    }))
})

describe("release (§2.4)", () => {
  it.scoped("release is the finaliser: failure and interruption release too", () =>
    Effect.gen(function*() {
      const t = yield* makeInstrumented
      const failed = yield* Effect.exit(withLock("k", Effect.fail("boom")).pipe(Effect.provide(t.layer)))
      assert.isTrue(Exit.isFailure(failed))
      assert.strictEqual(yield* t.backend.lockCount, 0)
      const fiber = yield* Effect.fork(withLock("k", Effect.never).pipe(Effect.provide(t.layer)))
      yield* settle
      assert.strictEqual(yield* t.backend.lockCount, 1)
      yield* Fiber.interrupt(fiber)
      assert.strictEqual(yield* t.backend.lockCount, 0)
    }))

  it.scoped("withLock returns once the release is confirmed, so the lock is free when it returns", () =>
    Effect.gen(function*() {
      const t = yield* makeInstrumented
      t.releaseDelayMillis = 100
      const fiber = yield* Effect.fork(withLock("k", Effect.succeed("done")).pipe(Effect.provide(t.layer)))
      yield* settle
      assert.isTrue(Option.isNone(yield* Fiber.poll(fiber)), "still releasing")
      yield* TestClock.adjust(100)
      assert.strictEqual(yield* Fiber.join(fiber), "done")
      assert.strictEqual(yield* t.backend.lockCount, 0)
    }))

  it.scoped("a failed release is counted and does not change the program's result", () =>
    Effect.gen(function*() {
      const t = yield* makeInstrumented
      t.failReleases = true
      const before = (yield* Metric.value(Metric.tagged(metrics.releaseFailures, "backend", "memory"))).count
      const result = yield* withLock("k", Effect.succeed("ok"), { lease: "5 seconds" }).pipe(Effect.provide(t.layer))
      assert.strictEqual(result, "ok")
      assert.strictEqual(
        (yield* Metric.value(Metric.tagged(metrics.releaseFailures, "backend", "memory"))).count,
        before + 1
      )
      assert.strictEqual(yield* t.backend.lockCount, 1, "the lock stays until its lease ends")
      assert.strictEqual(yield* activeWatchdogs, 0, "but nobody renews it")
      yield* TestClock.adjust(5_000)
      assert.strictEqual(yield* t.backend.lockCount, 0)
    }))
})

describe("loss is never silent (§2.5)", () => {
  it.scoped("stolen: interrupted with reason stolen within one renewal period", () =>
    Effect.gen(function*() {
      const t = yield* makeInstrumented
      let finished = false
      const fiber = yield* Effect.fork(
        withLock("k", Effect.zipRight(Effect.sleep(60_000), Effect.sync(() => finished = true)), { lease: "3 seconds" })
          .pipe(Effect.provide(t.layer), Effect.flip)
      )
      yield* settle
      yield* TestClock.adjust(500)
      yield* t.backend.primitives.forceRelease("k")
      yield* occupy(t, "k", 60_000)
      yield* TestClock.adjust(500) // the next renewal is due at 1 s
      yield* settle
      const error = yield* Fiber.join(fiber)
      assert.strictEqual(error._tag, "LockLostError")
      if (error._tag === "LockLostError") assert.strictEqual(error.reason, "stolen")
      assert.isFalse(finished)
    }))

  it.scoped("deleted: a force-unlock is reported as such, not as another owner", () =>
    Effect.gen(function*() {
      const t = yield* makeInstrumented
      const fiber = yield* Effect.fork(
        withLock("k", Effect.never, { lease: "3 seconds" }).pipe(Effect.provide(t.layer), Effect.flip)
      )
      yield* settle
      yield* Lock.forceUnlock("k").pipe(Effect.provide(t.layer))
      yield* TestClock.adjust(1_000)
      yield* settle
      const error = yield* Fiber.join(fiber)
      assert.strictEqual(error._tag, "LockLostError")
      if (error._tag === "LockLostError") {
        assert.strictEqual(error.reason, "deleted")
        assert.match(error.message, /force-unlocked/)
      }
    }))

  it.scoped("renewal failing: interrupted exactly at the local deadline (lease - drift)", () =>
    Effect.gen(function*() {
      const t = yield* makeInstrumented
      t.failAllRenewals = true
      const fiber = yield* Effect.fork(
        withLock("k", Effect.never, { lease: "10 seconds" }).pipe(Effect.provide(t.layer), Effect.flip)
      )
      yield* settle
      const deadline = 10_000 - (100 + 2) // drift = 1% of the lease + 2 ms
      yield* TestClock.adjust(deadline - 1)
      yield* settle
      assert.isTrue(Option.isNone(yield* Fiber.poll(fiber)), "still running before the deadline")
      assert.isAbove(t.calls.renew, 1, "renewals were retried")
      yield* TestClock.adjust(1)
      yield* settle
      const error = yield* Fiber.join(fiber)
      assert.strictEqual(error._tag, "LockLostError")
      if (error._tag === "LockLostError") {
        assert.strictEqual(error.reason, "renewal-failed")
        assert.strictEqual(error.heldMillis, deadline)
      }
    }))

  it.scoped("renew: false: interrupted at the end of the lease, before the backend frees it", () =>
    Effect.gen(function*() {
      const t = yield* makeInstrumented
      let inside = true
      const fiber = yield* Effect.fork(
        withLock("k", Effect.never.pipe(Effect.ensuring(Effect.sync(() => inside = false))), {
          lease: "1 second",
          renew: false
        }).pipe(Effect.provide(t.layer), Effect.flip)
      )
      yield* settle
      yield* TestClock.adjust(1_000 - 12)
      yield* settle
      const error = yield* Fiber.join(fiber)
      assert.isFalse(inside, "the program was interrupted")
      assert.strictEqual(error._tag, "LockLostError")
      if (error._tag === "LockLostError") assert.strictEqual(error.reason, "expired")
      assert.strictEqual(t.calls.renew, 0)
    }))

  it.scoped("a loss while inside a nested withLock interrupts the whole critical section", () =>
    Effect.gen(function*() {
      const t = yield* makeInstrumented
      t.failAllRenewals = true
      let innerFinished = false
      const fiber = yield* Effect.fork(
        withLock("k", withLock("k", Effect.zipRight(Effect.never, Effect.sync(() => innerFinished = true))), {
          lease: "1 second"
        }).pipe(Effect.provide(t.layer), Effect.flip)
      )
      yield* settle
      yield* TestClock.adjust(2_000)
      const error = yield* Fiber.join(fiber)
      assert.strictEqual(error._tag, "LockLostError")
      assert.isFalse(innerFinished)
      assert.strictEqual(yield* t.backend.lockCount, 0)
      assert.strictEqual(yield* activeWatchdogs, 0)
    }))

  it.scoped("Lease.guard and Lease.lost report loss to scoped acquirers", () =>
    Effect.gen(function*() {
      const t = yield* makeInstrumented
      const scope = yield* Scope.make()
      const lease = yield* Lock.acquire("k", { lease: "1 second", renew: false }).pipe(
        Scope.extend(scope),
        Effect.provide(t.layer)
      )
      const guarded = yield* Effect.fork(lease.guard(Effect.never))
      yield* settle
      yield* TestClock.adjust(1_000)
      yield* settle
      const error = yield* Effect.flip(Fiber.join(guarded))
      assert.strictEqual(error.reason, "expired")
      assert.isFalse(yield* lease.isHeld)
      assert.strictEqual((yield* Effect.flip(lease.lost)).reason, "expired")
      yield* Scope.close(scope, Exit.void)
    }))
})

describe("fencing (§2.6)", () => {
  it.scoped("tokens strictly increase per key and survive expiry; keys count separately", () =>
    Effect.gen(function*() {
      const t = yield* makeInstrumented
      const token = (key: string) =>
        withLock(key, (lease) => Effect.succeed(lease.fencingToken)).pipe(Effect.provide(t.layer))
      const a1 = yield* token("a")
      const a2 = yield* token("a")
      yield* occupy(t, "a", 100)
      yield* TestClock.adjust(200)
      const a3 = yield* token("a")
      const b1 = yield* token("b")
      assert.deepStrictEqual([a1, a2, a3, b1], [1n, 2n, 4n, 1n])
    }))
})

describe("bad input (§2.8)", () => {
  it.scoped("each bad option names its field and nothing reaches the backend", () =>
    Effect.gen(function*() {
      const t = yield* makeInstrumented
      const attempts: ReadonlyArray<Effect.Effect<unknown, { readonly _tag: string }, LockBackend>> = [
        withLock("", Effect.void),
        withLock("x".repeat(4097), Effect.void),
        withLock("k", Effect.void, { lease: 0 }),
        withLock("k", Effect.void, { lease: "-1 seconds" }),
        withLock("k", Effect.void, { lease: Number.NaN }),
        withLock("k", Effect.void, { lease: Number.POSITIVE_INFINITY }),
        withLock("k", Effect.void, { lease: "nonsense" as never }),
        withLock("k", Effect.void, { lease: 10_000, renew: 10_000 }),
        withLock("k", Effect.void, { wait: -1 }),
        withLock("k", Effect.void, { retry: Schedule.recurs(0) }),
        withLock("k", Effect.void, { fencing: "yes" as never }),
        Effect.scoped(Lock.acquire("", {})),
        Effect.scoped(Lock.tryAcquire("k", { lease: -1 })),
        Lock.withLockIfAvailable("", Effect.void),
        Lock.forceUnlock(""),
        Lock.isLocked("")
      ]
      const fields: Array<string> = []
      for (const attempt of attempts) {
        const error = yield* Effect.flip(Effect.provide(attempt, t.layer))
        fields.push(error instanceof LockOptionsError ? error.field : error._tag)
      }
      assert.deepStrictEqual(fields, [
        "key",
        "key",
        "lease",
        "lease",
        "lease",
        "lease",
        "lease",
        "renew",
        "wait",
        "retry",
        "fencing",
        "key",
        "lease",
        "key",
        "key",
        "key"
      ])
      assert.deepStrictEqual(t.calls, { tryAcquire: 0, renew: 0, release: 0, subscribe: 0 })
    }))

  it.scoped("a key of exactly 4096 bytes is accepted", () =>
    Effect.gen(function*() {
      const t = yield* makeInstrumented
      const value = yield* withLock("é".repeat(2048), Effect.succeed(1)).pipe(Effect.provide(t.layer))
      assert.strictEqual(value, 1)
    }))
})
