/**
 * Regression tests for the edge cases the core re-cut fixed (issue "The core, re-cut..."), on the
 * memory backend. Each one failed before: see the issue's list for what a user ran into.
 * (Reentrancy across backends, siblings' ownership and `wait` among siblings are in lock.test.ts.)
 */
import { assert, describe, expectTypeOf, it } from "@effect/vitest"
import { Context, Deferred, Duration, Effect, Exit, Fiber, Option, Scope, TestClock } from "effect"
import { execFile } from "node:child_process"
import { mkdirSync, writeFileSync } from "node:fs"
import { join, resolve } from "node:path"
import { fileURLToPath } from "node:url"
import { promisify } from "node:util"
import type { LockBackendError } from "../src/index.js"
import { Lock, LockOptionsError, withLock } from "../src/index.js"
import { maxRenewOf } from "../src/internal/lock/options.js"
import { makeInstrumented } from "./support/instrumented.js"

const settle = Effect.repeatN(Effect.yieldNow(), 50)

const optionsError = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.map(Effect.flip(effect), (error) => {
    assert.instanceOf(error, LockOptionsError)
    return error as LockOptionsError
  })

describe("leases are whole milliseconds inside PEXPIRE's range", () => {
  it.scoped("a fractional or out-of-range lease is refused before any backend call", () =>
    Effect.gen(function*() {
      const t = yield* makeInstrumented
      for (const lease of [2500.5, "1500500 micros", 1e21, Duration.nanos(1n), 2 ** 31] as const) {
        const error = yield* optionsError(withLock("k", Effect.void, { lease }).pipe(Effect.provide(t.layer)))
        assert.strictEqual(error.field, "lease", String(lease))
      }
      const renew = yield* optionsError(
        withLock("k", Effect.void, { lease: "10 seconds", renew: 1000.5 }).pipe(Effect.provide(t.layer))
      )
      assert.strictEqual(renew.field, "renew")
      const wait = yield* optionsError(withLock("k", Effect.void, { wait: 0.5 }).pipe(Effect.provide(t.layer)))
      assert.strictEqual(wait.field, "wait")
      assert.deepStrictEqual(t.calls, { tryAcquire: 0, renew: 0, release: 0, subscribe: 0 })
      // The largest lease is accepted.
      assert.strictEqual(
        yield* withLock("k", Effect.succeed(1), { lease: 2 ** 31 - 1 }).pipe(Effect.provide(t.layer)),
        1
      )
    }))
})

describe("a renew period that validation accepts never loses a healthy lock", () => {
  it.scoped("a period with no time left for the renewal is refused (lease 10 s, renew 9.9 s)", () =>
    Effect.gen(function*() {
      const t = yield* makeInstrumented
      const error = yield* optionsError(
        withLock("k", Effect.void, { lease: "10 seconds", renew: "9900 millis" }).pipe(Effect.provide(t.layer))
      )
      assert.strictEqual(error.field, "renew")
      assert.match(error.reason, /9796 ms/)
    }))

  it.scoped("a lease too short to renew is refused unless renewal is off", () =>
    Effect.gen(function*() {
      const t = yield* makeInstrumented
      for (const lease of [3, 4]) {
        const error = yield* optionsError(withLock("k", Effect.void, { lease }).pipe(Effect.provide(t.layer)))
        assert.strictEqual(error.field, "lease")
        assert.match(error.reason, /renew: false/)
      }
      assert.strictEqual(
        yield* withLock("k", Effect.succeed("ok"), { lease: 4, renew: false }).pipe(Effect.provide(t.layer)),
        "ok"
      )
    }))

  it.scoped(
    "every accepted lease, at the default period and at the longest, holds through twenty leases",
    () =>
      Effect.gen(function*() {
        const t = yield* makeInstrumented
        const leases = [5, 6, 7, 10, 33, 100, 301, 1_000, 9_999, 30_000]
        for (const lease of leases) {
          for (const renew of [true, maxRenewOf(lease)] as const) {
            const fiber = yield* Effect.fork(
              withLock(`k${lease}`, Effect.as(Effect.sleep(lease * 20), "done"), { lease, renew }).pipe(
                Effect.provide(t.layer)
              )
            )
            yield* settle
            for (let i = 0; i < 40; i++) {
              yield* TestClock.adjust(Math.ceil(lease / 2))
              yield* settle
            }
            const exit = yield* Fiber.await(fiber)
            assert.deepStrictEqual(exit, Exit.succeed("done"), `lease ${lease}, renew ${String(renew)}`)
          }
        }
      }),
    180_000
  )
})

describe("a waiter interrupted as a release hands it the lock", () => {
  it.scoped("leaves no orphaned lock: the hand-over is released on its behalf", () =>
    Effect.gen(function*() {
      // Graceful shutdown: the supervisor lets the holder finish and interrupts the waiter. Where
      // the interrupt lands relative to the hand-over depends on scheduling: try each gap.
      for (let gap = 0; gap <= 6; gap++) {
        const t = yield* makeInstrumented
        const done = yield* Deferred.make<void>()
        const holder = yield* Effect.fork(withLock("k", Deferred.await(done)).pipe(Effect.provide(t.layer)))
        yield* settle
        let entered = false
        const waiter = yield* Effect.fork(
          withLock("k", Effect.sync(() => entered = true)).pipe(Effect.provide(t.layer))
        )
        yield* settle
        yield* Deferred.succeed(done, void 0)
        yield* Effect.repeatN(Effect.yieldNow(), gap - 1)
        yield* Fiber.interrupt(waiter)
        yield* Fiber.join(holder)
        yield* settle
        const count = yield* t.backend.lockCount
        assert.strictEqual(count, 0, `gap ${gap}: nobody holds the lock (the waiter ${entered ? "ran" : "never ran"})`)
        assert.strictEqual(
          yield* withLock("k", Effect.succeed("free"), { wait: 0 }).pipe(Effect.provide(t.layer)),
          "free"
        )
      }
    }))
})

describe("lease.guard after the release", () => {
  it.scoped("runs nothing and fails with LockLostError (released), even while another owner holds the key", () =>
    Effect.gen(function*() {
      const t = yield* makeInstrumented
      const lease = yield* Effect.scoped(Lock.acquire("k")).pipe(Effect.provide(t.layer))
      const scope = yield* Scope.make()
      yield* Lock.acquire("k").pipe(Scope.extend(scope), Effect.provide(t.layer))
      let ran = false
      const error = yield* Effect.flip(lease.guard(Effect.sync(() => ran = true)))
      assert.isFalse(ran)
      assert.strictEqual(error.reason, "released")
      assert.strictEqual((yield* Effect.flip(lease.lost)).reason, "released")
      assert.isFalse(yield* lease.isHeld)
      yield* Scope.close(scope, Exit.void)
    }))

  it.scoped("a guarded effect still running when the scope closes is interrupted", () =>
    Effect.gen(function*() {
      const t = yield* makeInstrumented
      const outer = yield* Scope.make()
      const lease = yield* Effect.scoped(Lock.acquire("k")).pipe(
        Effect.provide(t.layer),
        Effect.forkIn(outer),
        Effect.flatMap(Fiber.join)
      )
      assert.isFalse(yield* lease.isHeld)
      const inner = yield* Scope.make()
      const held = yield* Lock.acquire("j").pipe(Scope.extend(inner), Effect.provide(t.layer))
      const guarded = yield* Effect.fork(held.guard(Effect.never))
      yield* settle
      yield* Scope.close(inner, Exit.void)
      const error = yield* Effect.flip(Fiber.join(guarded))
      assert.strictEqual(error.reason, "released")
      yield* Scope.close(outer, Exit.void)
    }))
})

describe("keys must be well-formed UTF-16", () => {
  it.scoped("a lone surrogate is refused; a whole emoji is fine", () =>
    Effect.gen(function*() {
      const t = yield* makeInstrumented
      const cut = "order:🔒".slice(0, -1)
      for (const key of [cut, "\uDC00x", "a\uD800b"]) {
        const error = yield* optionsError(withLock(key, Effect.void).pipe(Effect.provide(t.layer)))
        assert.strictEqual(error.field, "key")
        assert.match(error.reason, /lone surrogate/)
      }
      assert.strictEqual(yield* withLock("order:🔒", Effect.succeed(1)).pipe(Effect.provide(t.layer)), 1)
      assert.strictEqual(t.calls.tryAcquire, 1)
    }))
})

describe("programs", () => {
  class Answer extends Context.Tag("Answer")<Answer, number>() {}

  it.scoped("a program that is both callable and an Effect (a Context.Tag) runs as an Effect", () =>
    Effect.gen(function*() {
      const t = yield* makeInstrumented
      const value = yield* withLock("k", Answer).pipe(Effect.provide(t.layer), Effect.provideService(Answer, 42))
      assert.strictEqual(value, 42)
      const piped = yield* Answer.pipe(Lock.withLock("k"), Effect.provide(t.layer), Effect.provideService(Answer, 7))
      assert.strictEqual(piped, 7)
      const maybe = yield* Lock.withLockIfAvailable("k", Answer).pipe(
        Effect.provide(t.layer),
        Effect.provideService(Answer, 1)
      )
      assert.deepStrictEqual(maybe, Option.some(1))
    }))

  it("LockBackendError.operation is a closed union of names", () => {
    expectTypeOf<LockBackendError["operation"]>().toEqualTypeOf<
      | "connect"
      | "load-scripts"
      | "check-permissions"
      | "acquire"
      | "renew"
      | "release"
      | "force-release"
      | "inspect"
      | "subscribe"
      | "fenced-set"
      | "set-permits"
    >()
  })
})

describe("a short script", () => {
  const root = resolve(fileURLToPath(import.meta.url), "..", "..")
  const dir = join(root, ".scratch", "edge-cases")

  it("leaves no timer behind once its last lock is released, so Node can exit", async () => {
    mkdirSync(dir, { recursive: true })
    const script = join(dir, "short-script.ts")
    writeFileSync(
      script,
      `import { Effect } from "effect"
import { MemoryBackend, withLock } from ${JSON.stringify(join(root, "src", "index.ts"))}

const program = Effect.gen(function*() {
  // Held across a real timer tick, so that whatever renews it has started and armed its timer.
  yield* withLock("job", Effect.sleep("20 millis"), { lease: "1 hour" })
  const lease = yield* Effect.scoped(withLock("job", (lease) => Effect.succeed(lease)))
  return lease.key
})
Effect.runPromise(Effect.provide(program, MemoryBackend.layer)).then((key) => {
  // What keeps the event loop alive now: a watchdog timer would show up as a Timeout.
  console.log(JSON.stringify({ key, resources: process.getActiveResourcesInfo() }))
})
`
    )
    const { stdout } = await promisify(execFile)(
      process.execPath,
      [join(root, "node_modules", "tsx", "dist", "cli.mjs"), script],
      { cwd: root, timeout: 30_000 }
    )
    const report = JSON.parse(stdout.trim().split("\n").pop()!) as { key: string; resources: Array<string> }
    assert.strictEqual(report.key, "job")
    assert.notInclude(report.resources, "Timeout", `active resources: ${report.resources.join(", ")}`)
  }, 60_000)
})
