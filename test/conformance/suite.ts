/**
 * The conformance suite: every behaviour a backend must show, written once and run over every
 * backend (Memory in test/memory.conformance.test.ts, Redis in test/redis/conformance.test.ts).
 * It runs on the live clock with short leases, because a real server keeps real time.
 */
import { assert, describe, layer as withLayer } from "@effect/vitest"
import type { Layer } from "effect"
import { Deferred, Duration, Effect, Exit, Fiber, Option, Ref, Schedule } from "effect"
import { Lock, LockBackend, withLock } from "../../src/index.js"
import type { LockBackendShape } from "../../src/index.js"

let keySeq = 0
/** A fresh key per test, so tests never see each other's locks. */
const freshKey = (label: string) => `conformance:${label}:${process.pid}:${Date.now()}:${++keySeq}`

const elapsedMillis = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.map(Effect.timed(effect), ([duration, a]) => [Duration.toMillis(duration), a] as const)

/** Occupy `key` as a foreign client (no watchdog, nobody releases it) for `leaseMillis`. */
const occupy = (backend: LockBackendShape, key: string, leaseMillis: number, owner = "foreign-client:1") =>
  Effect.flatMap(
    backend.primitives.tryAcquire({ key, owner, leaseMillis, fencing: true }),
    (result) => result._tag === "Acquired" ? Effect.succeed(result.fencingToken) : Effect.dieMessage(`${key} was busy`)
  )

export const runConformance = (name: string, layer: Layer.Layer<LockBackend, unknown>) =>
  describe(`conformance: ${name}`, () => {
    withLayer(layer, { timeout: 60_000, excludeTestServices: true })((it) => {
      it.effect("withLock runs the program, returns its value and releases", () =>
        Effect.gen(function*() {
          const key = freshKey("basic")
          const value = yield* withLock(key, Effect.succeed(42))
          assert.strictEqual(value, 42)
          assert.isFalse(yield* Lock.isLocked(key))
          const scoped = yield* Effect.scoped(withLock(key, Lock.isLocked(key)))
          assert.isTrue(scoped)
        }))

      it.effect("the three call forms and the lease-function form all lock", () =>
        Effect.gen(function*() {
          const key = freshKey("forms")
          const held = Lock.isLocked(key)
          assert.isTrue(yield* Effect.scoped(withLock(key, held)))
          assert.isTrue(yield* withLock(key, held, { lease: "10 seconds", wait: "5 seconds" }))
          assert.isTrue(yield* held.pipe(Lock.withLock(key, { wait: "5 seconds" })))
          const token = yield* withLock(key, (lease) => Effect.succeed(lease.fencingToken))
          assert.isTrue(token > 0n)
          assert.isFalse(yield* held)
        }))

      it.effect("mutual exclusion: a read-yield-write counter under contention ends exact", () =>
        Effect.gen(function*() {
          const key = freshKey("mutex")
          let counter = 0
          let inside = 0
          let maxInside = 0
          const worker = withLock(
            key,
            Effect.gen(function*() {
              inside++
              maxInside = Math.max(maxInside, inside)
              const read = counter
              yield* Effect.sleep(2)
              counter = read + 1
              inside--
            }),
            { lease: "5 seconds" }
          )
          yield* Effect.all(Array.from({ length: 20 }, () => worker), { concurrency: "unbounded" })
          assert.strictEqual(counter, 20)
          assert.strictEqual(maxInside, 1)
        }))

      it.effect("fencing tokens strictly increase in grant order and survive expiry", () =>
        Effect.gen(function*() {
          const key = freshKey("fencing")
          const tokens: Array<bigint> = []
          const take = withLock(key, (lease) => Effect.sync(() => tokens.push(lease.fencingToken)))
          yield* Effect.all(Array.from({ length: 8 }, () => take), { concurrency: "unbounded" })
          // Let a lease expire on its own (nobody releases), then acquire again.
          const backend = yield* LockBackend
          const foreign = yield* occupy(backend, key, 150)
          yield* Effect.sleep(300)
          yield* take
          const all = [...tokens.slice(0, 8), foreign, tokens[8]!]
          for (let i = 1; i < all.length; i++) assert.isTrue(all[i]! > all[i - 1]!, `token ${i} increases`)
        }))

      it.effect("fencing: false issues no token", () =>
        Effect.gen(function*() {
          const token = yield* withLock(freshKey("nofence"), (lease) => Effect.succeed(lease.fencingToken), {
            fencing: false
          })
          assert.strictEqual(token, 0n)
        }))

      it.effect("tryAcquire and withLockIfAvailable take one attempt", () =>
        Effect.gen(function*() {
          const key = freshKey("try")
          const backend = yield* LockBackend
          const free = yield* Effect.scoped(Effect.map(Lock.tryAcquire(key), Option.isSome))
          assert.isTrue(free)
          yield* occupy(backend, key, 5_000)
          const [millis, busy] = yield* elapsedMillis(Effect.scoped(Lock.tryAcquire(key)))
          assert.isTrue(Option.isNone(busy))
          assert.isBelow(millis, 2_000)
          const skipped = yield* Lock.withLockIfAvailable(key, Effect.succeed("ran"))
          assert.isTrue(Option.isNone(skipped))
          yield* Lock.forceUnlock(key)
          const ran = yield* Lock.withLockIfAvailable(key, Effect.succeed("ran"))
          assert.deepStrictEqual(ran, Option.some("ran"))
        }))

      it.effect("a release wakes a waiter long before its retry schedule would", () =>
        Effect.gen(function*() {
          const key = freshKey("wake")
          const held = yield* Deferred.make<void>()
          const holder = yield* Effect.fork(
            withLock(key, Effect.zipRight(Deferred.succeed(held, void 0), Effect.sleep(200)))
          )
          yield* Deferred.await(held)
          const [millis] = yield* elapsedMillis(
            withLock(key, Effect.void, { retry: Schedule.spaced("30 seconds") })
          )
          yield* Fiber.join(holder)
          assert.isBelow(millis, 10_000, "woken by the release, not by the 30 s schedule")
        }))

      it.effect("a waiter never sleeps past the holder's remaining lease", () =>
        Effect.gen(function*() {
          const key = freshKey("ttl")
          const backend = yield* LockBackend
          yield* occupy(backend, key, 300) // a holder that vanishes without releasing
          const [millis, token] = yield* elapsedMillis(
            withLock(key, (lease) => Effect.succeed(lease.fencingToken), { retry: Schedule.spaced("30 seconds") })
          )
          assert.isTrue(token > 0n)
          assert.isBelow(millis, 10_000, "got in when the lease ended, not after the 30 s schedule")
        }))

      it.effect("wait bounds the acquisition with LockTimeoutError (wait-elapsed)", () =>
        Effect.gen(function*() {
          const key = freshKey("wait")
          const backend = yield* LockBackend
          yield* occupy(backend, key, 10_000)
          const error = yield* Effect.flip(withLock(key, Effect.void, { wait: "200 millis" }))
          assert.strictEqual(error._tag, "LockTimeoutError")
          if (error._tag === "LockTimeoutError") {
            assert.strictEqual(error.reason, "wait-elapsed")
            assert.strictEqual(error.key, key)
            assert.isAtLeast(error.waitedMillis, 200)
          }
          const immediate = yield* Effect.flip(withLock(key, Effect.void, { wait: 0 }))
          assert.strictEqual(immediate._tag, "LockTimeoutError")
          yield* Lock.forceUnlock(key)
        }))

      it.effect("a retry schedule that ends gives LockTimeoutError (retries-exhausted)", () =>
        Effect.gen(function*() {
          const key = freshKey("retries")
          const backend = yield* LockBackend
          yield* occupy(backend, key, 10_000)
          const error = yield* Effect.flip(
            withLock(key, Effect.void, {
              retry: Schedule.spaced("10 millis").pipe(Schedule.compose(Schedule.recurs(3)))
            })
          )
          assert.strictEqual(error._tag, "LockTimeoutError")
          if (error._tag === "LockTimeoutError") assert.strictEqual(error.reason, "retries-exhausted")
          yield* Lock.forceUnlock(key)
        }))

      it.effect("interrupting a waiter leaves no lock and no waiter behind", () =>
        Effect.gen(function*() {
          const key = freshKey("interrupt")
          const backend = yield* LockBackend
          yield* occupy(backend, key, 400)
          const entered = yield* Ref.make(false)
          const waiter = yield* Effect.fork(withLock(key, Ref.set(entered, true)))
          yield* Effect.sleep(50)
          yield* Fiber.interrupt(waiter)
          yield* Effect.sleep(700) // past the foreign lease: an orphaned waiter would have got in
          assert.isFalse(yield* Ref.get(entered))
          assert.isFalse(yield* Lock.isLocked(key))
        }))

      it.effect("reentrancy: a nested withLock enters at once with the same token", () =>
        Effect.gen(function*() {
          const key = freshKey("reentrant")
          const result = yield* withLock(key, (outer) =>
            withLock(key, (inner) => Effect.succeed([outer, inner] as const), { wait: 0 }))
          assert.strictEqual(result[0].holdCount, 1)
          assert.strictEqual(result[1].holdCount, 2)
          assert.strictEqual(result[0].fencingToken, result[1].fencingToken)
          assert.isFalse(yield* Lock.isLocked(key))
        }))

      it.effect("fibers the program forks share its owner; unrelated fibers exclude each other", () =>
        Effect.gen(function*() {
          const key = freshKey("owner")
          // The outsider is forked before the lock is taken, so it has no owner of its own.
          const go = yield* Deferred.make<void>()
          const outsider = yield* Effect.fork(
            Effect.zipRight(Deferred.await(go), withLock(key, Effect.succeed(true), { wait: 0 }))
          )
          const [childEntered, outsiderGotIn] = yield* withLock(key, () =>
            Effect.gen(function*() {
              const child = yield* Effect.fork(withLock(key, Effect.succeed(true), { wait: 0 }))
              const childEntered = yield* Fiber.join(child)
              yield* Deferred.succeed(go, void 0)
              const outsiderGotIn = yield* Effect.orElseSucceed(Fiber.join(outsider), () => false)
              return [childEntered, outsiderGotIn] as const
            }))
          assert.isTrue(childEntered)
          assert.isFalse(outsiderGotIn)
        }))

      it.effect("the watchdog keeps a program alive past its lease", () =>
        Effect.gen(function*() {
          const key = freshKey("watchdog")
          const result = yield* withLock(key, Effect.as(Effect.sleep(1_000), "done"), { lease: "300 millis" })
          assert.strictEqual(result, "done")
          assert.isFalse(yield* Lock.isLocked(key))
        }))

      it.effect("renew: false interrupts the program at the end of its lease", () =>
        Effect.gen(function*() {
          const key = freshKey("norenew")
          let finished = false
          const error = yield* Effect.flip(
            withLock(key, Effect.zipRight(Effect.sleep(5_000), Effect.sync(() => finished = true)), {
              lease: "300 millis",
              renew: false
            })
          )
          assert.strictEqual(error._tag, "LockLostError")
          if (error._tag === "LockLostError") assert.strictEqual(error.reason, "expired")
          assert.isFalse(finished)
        }))

      it.effect("a lock taken away is never silent: the program is interrupted with LockLostError", () =>
        Effect.gen(function*() {
          const key = freshKey("stolen")
          const backend = yield* LockBackend
          const held = yield* Deferred.make<void>()
          let finished = false
          const victim = yield* Effect.fork(
            withLock(
              key,
              Effect.zipRight(
                Deferred.succeed(held, void 0),
                Effect.zipRight(Effect.sleep(5_000), Effect.sync(() => finished = true))
              ),
              { lease: "600 millis" }
            )
          )
          yield* Deferred.await(held)
          yield* Lock.forceUnlock(key)
          yield* occupy(backend, key, 5_000, "thief:1")
          const exit = yield* Fiber.await(victim)
          assert.isTrue(Exit.isFailure(exit))
          const error = yield* Effect.flip(exit)
          assert.strictEqual(error._tag, "LockLostError")
          if (error._tag === "LockLostError") assert.strictEqual(error.reason, "stolen")
          assert.isFalse(finished)
          // The thief's lock is untouched by the victim's release.
          const info = yield* Lock.inspect(key)
          assert.deepStrictEqual(Option.map(info, (i) => i.holders.map((h) => h.owner)), Option.some(["thief:1"]))
          yield* Lock.forceUnlock(key)
        }))

      it.effect("a Lease acquired in a scope is held until the scope closes, and reports loss", () =>
        Effect.gen(function*() {
          const key = freshKey("scoped")
          const lease = yield* Effect.scoped(
            Effect.gen(function*() {
              const lease = yield* Lock.acquire(key, { lease: "300 millis", renew: false })
              assert.isTrue(yield* lease.isHeld)
              assert.isTrue(Option.isSome(yield* Lock.currentLease(key)))
              const lost = yield* Effect.flip(lease.lost)
              assert.strictEqual(lost.reason, "expired")
              const guarded = yield* Effect.flip(lease.guard(Effect.succeed(1)))
              assert.strictEqual(guarded._tag, "LockLostError")
              return lease
            })
          )
          assert.isFalse(yield* lease.isHeld)
          assert.isTrue(Option.isNone(yield* Lock.currentLease(key)))
        }))

      it.effect("forceUnlock removes any holder and wakes waiters", () =>
        Effect.gen(function*() {
          const key = freshKey("force")
          const backend = yield* LockBackend
          yield* occupy(backend, key, 30_000)
          assert.isTrue(yield* Lock.isLocked(key))
          const waiter = yield* Effect.fork(
            elapsedMillis(withLock(key, Effect.succeed("in"), { retry: Schedule.spaced("30 seconds") }))
          )
          yield* Effect.sleep(100)
          assert.isTrue(yield* Lock.forceUnlock(key))
          const [millis, value] = yield* Fiber.join(waiter)
          assert.strictEqual(value, "in")
          assert.isBelow(millis, 10_000)
          assert.isFalse(yield* Lock.forceUnlock(key))
        }))

      it.effect("bad input fails with LockOptionsError naming the field and touches nothing", () =>
        Effect.gen(function*() {
          const key = freshKey("bad")
          const cases: ReadonlyArray<
            readonly [string, Effect.Effect<unknown, { readonly _tag: string }, LockBackend>]
          > = [
            ["key", withLock("", Effect.void)],
            ["key", withLock("x".repeat(1024 * 1024), Effect.void)],
            ["lease", withLock(key, Effect.void, { lease: 0 })],
            ["lease", withLock(key, Effect.void, { lease: -5 })],
            ["lease", withLock(key, Effect.void, { lease: Number.NaN })],
            ["lease", withLock(key, Effect.void, { lease: Number.POSITIVE_INFINITY })],
            ["renew", withLock(key, Effect.void, { lease: "1 second", renew: "2 seconds" })],
            ["renew", withLock(key, Effect.void, { lease: "1 second", renew: "1 second" })],
            ["wait", withLock(key, Effect.void, { wait: -1 })],
            ["retry", withLock(key, Effect.void, { retry: Schedule.stop })]
          ]
          for (const [field, effect] of cases) {
            const error = yield* Effect.flip(effect)
            assert.strictEqual(error._tag, "LockOptionsError", field)
            if (error._tag === "LockOptionsError") {
              assert.strictEqual((error as unknown as { field: string }).field, field)
            }
          }
          assert.isFalse(yield* Lock.isLocked(key))
        }))

      it.effect("leases that are not whole milliseconds, and lone surrogates, are refused and leave no key", () =>
        Effect.gen(function*() {
          const key = freshKey("whole")
          for (const lease of [2500.5, "1500500 micros", 1e21] as const) {
            const error = yield* Effect.flip(withLock(key, Effect.void, { lease }))
            assert.strictEqual(error._tag, "LockOptionsError", String(lease))
          }
          const cut = `${key}:🔒`.slice(0, -1)
          assert.strictEqual((yield* Effect.flip(withLock(cut, Effect.void)))._tag, "LockOptionsError")
          assert.isFalse(yield* Lock.isLocked(key))
          assert.isFalse(yield* Lock.isLocked(`${key}:\uFFFD`), "nothing under the replacement character either")
        }))

      it.effect("primitives count holds per owner: two acquisitions need two releases", () =>
        Effect.gen(function*() {
          const key = freshKey("counts")
          const { primitives } = yield* LockBackend
          const request = { key, owner: "owner:1", leaseMillis: 10_000, fencing: true }
          const first = yield* primitives.tryAcquire(request)
          const second = yield* primitives.tryAcquire(request)
          assert.strictEqual(first._tag, "Acquired")
          assert.deepStrictEqual(second, first, "a reentry returns the same token")
          assert.deepStrictEqual(yield* primitives.release(key, "owner:1"), { _tag: "StillHeld" })
          const info = yield* Lock.inspect(key)
          assert.deepStrictEqual(Option.map(info, (i) => i.holders), Option.some([{ owner: "owner:1", holdCount: 1 }]))
          assert.deepStrictEqual(yield* primitives.release(key, "owner:1"), { _tag: "Released" })
          assert.deepStrictEqual(yield* primitives.release(key, "owner:1"), { _tag: "NotHeld" })
          assert.isFalse(yield* Lock.isLocked(key))
        }))

      it.effect("renewals of many holds in one call: one outcome each, in order", () =>
        Effect.gen(function*() {
          const key = freshKey("renew-many")
          const { primitives } = yield* LockBackend
          yield* occupy(yield* LockBackend, `${key}:a`, 5_000, "owner:a")
          yield* occupy(yield* LockBackend, `${key}:b`, 5_000, "owner:b")
          const outcomes = yield* primitives.renew([
            { key: `${key}:a`, owner: "owner:a", leaseMillis: 20_000, fencing: true },
            { key: `${key}:b`, owner: "owner:x", leaseMillis: 20_000, fencing: true },
            { key: `${key}:c`, owner: "owner:c", leaseMillis: 20_000, fencing: true }
          ])
          assert.deepStrictEqual(outcomes, [
            { _tag: "Renewed" },
            { _tag: "Lost", reason: "stolen" },
            { _tag: "Lost", reason: "expired" }
          ])
          const ttl = Option.flatMap(yield* Lock.inspect(`${key}:a`), (i) => Option.fromNullable(i.ttlMillis))
          assert.isTrue(Option.getOrElse(ttl, () => 0) > 5_000, "a's lease was extended")
          yield* Lock.forceUnlock(`${key}:a`)
          yield* Lock.forceUnlock(`${key}:b`)
        }))

      it.effect("a waiter interrupted as the release hands it the lock leaves no lock behind", () =>
        Effect.gen(function*() {
          const key = freshKey("orphan")
          for (let gap = 1; gap <= 4; gap++) {
            const done = yield* Deferred.make<void>()
            const held = yield* Deferred.make<void>()
            const holder = yield* Effect.fork(
              withLock(key, Effect.zipRight(Deferred.succeed(held, void 0), Deferred.await(done)))
            )
            yield* Deferred.await(held)
            const waiter = yield* Effect.fork(withLock(key, Effect.void))
            yield* Effect.sleep(20)
            yield* Deferred.succeed(done, void 0)
            yield* Effect.repeatN(Effect.yieldNow(), gap - 1)
            yield* Fiber.interrupt(waiter)
            yield* Fiber.join(holder)
            // Give a release on the waiter's behalf (one round trip) time to land.
            for (let i = 0; i < 50 && (yield* Lock.isLocked(key)); i++) yield* Effect.sleep(10)
            assert.isFalse(yield* Lock.isLocked(key), `gap ${gap}: no orphaned lock`)
          }
        }))
    })
  })
