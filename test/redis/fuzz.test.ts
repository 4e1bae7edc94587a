/**
 * Input fuzzing with parity: fast-check generates keys (any UTF-16 including lone surrogates,
 * braces, colons, very long, empty hash tags), durations (numbers, strings, `Duration` values,
 * edge values), retry schedules and option objects, and each input runs against the memory and
 * the Redis backend side by side. Both accept the same inputs and reject the same ones with the
 * same `LockOptionsError`; an accepted input behaves the same on both; a rejected one leaves
 * nothing in Redis (`DBSIZE` unchanged, and a `SCAN` at the end finds no lock, only fencing
 * counters).
 *
 * 10,000 runs in total under `CI=true`, 1,000 otherwise (`FUZZ_RUNS` sets it), split over the
 * properties (30% keys, 40% durations, 30% options); each run costs a handful of round trips at
 * most. Measured times are in docs/redis.md (Input fuzzing).
 */
import { afterAll, assert, beforeAll, describe, it } from "@effect/vitest"
import { Context, Duration, Effect, Exit, FastCheck as fc, Layer, Option, Schedule, Scope } from "effect"
import { Redis } from "ioredis"
import type { LockBackendShape } from "../../src/index.js"
import { Lock, LockBackend } from "../../src/index.js"
import type { LockOptions } from "../../src/Lock.js"
import * as MemoryBackend from "../../src/MemoryBackend.js"
import * as RedisBackend from "../../src/RedisBackend.js"
import type { RedisServer } from "../support/redisServer.js"
import { skipRedis, startRedisServer } from "../support/redisServer.js"

const totalRuns = Number(process.env.FUZZ_RUNS ?? (process.env.CI === "true" ? 10_000 : 1_000))
const runs = { keys: Math.round(totalRuns * 0.3), durations: Math.round(totalRuns * 0.4), options: 0 }
runs.options = totalRuns - runs.keys - runs.durations

// --- arbitraries ----------------------------------------------------------------------------------

const keyChars = fc.constantFrom(
  "{",
  "}",
  ":",
  "a",
  "Z",
  "0",
  " ",
  "\u00e9",
  "\ud83d\ude00",
  "\ud800",
  "\udc00",
  "\u0000"
)
const arbKey: fc.Arbitrary<string> = fc.oneof(
  fc.string16bits({ maxLength: 40 }),
  fc.stringOf(keyChars, { maxLength: 20 }),
  fc.constantFrom("", "{}", "a{}b", "{a}", "}{", "{{}}", ":", "::{x}::", "\ud800", "a\udc00b"),
  fc.tuple(fc.constantFrom("a", "\u00e9", "\ud83d\ude00"), fc.integer({ min: 1_000, max: 5_000 })).map(([c, n]) =>
    c.repeat(n)
  ),
  fc.fullUnicodeString({ maxLength: 30 })
)

const arbMillis = fc.oneof(
  fc.integer({ min: -5, max: 120_000 }),
  fc.double({ noDefaultInfinity: false, noNaN: false }),
  fc.constantFrom(0, -0, 1, 1.5, 2 ** 31 - 1, 2 ** 31, Number.MAX_SAFE_INTEGER, Infinity, -Infinity, NaN)
)
const arbDuration: fc.Arbitrary<unknown> = fc.oneof(
  arbMillis,
  arbMillis.map((n) => `${n} millis`),
  fc.constantFrom(
    "1 second",
    "30 seconds",
    "10 minutes",
    "0 millis",
    "-1 seconds",
    "1.5 millis",
    "abc",
    "",
    "1 fortnight"
  ),
  fc.integer({ min: 0, max: 100_000 }).map(Duration.millis),
  fc.bigInt({ min: 0n, max: 10n ** 12n }).map(Duration.nanos),
  fc.constantFrom(Duration.zero, Duration.infinity, Duration.nanos(1n), Duration.micros(1500n)),
  fc.tuple(fc.integer({ min: -1, max: 100 }), fc.integer({ min: -1, max: 999_999_999 })),
  fc.constantFrom(undefined, null, {}, [], true)
)

const arbSchedule: fc.Arbitrary<unknown> = fc.oneof(
  fc.integer({ min: 0, max: 3 }).map((n) => Schedule.recurs(n)),
  fc.constantFrom(
    Schedule.stop,
    Schedule.forever,
    Schedule.spaced("10 millis"),
    Schedule.exponential("5 millis"),
    Schedule.fixed("1 second"),
    Schedule.once
  ),
  fc.constantFrom(undefined, null, 5, "10 millis", {}, () => 1)
)

const arbOptions: fc.Arbitrary<unknown> = fc.oneof(
  fc.record(
    {
      lease: arbDuration,
      renew: fc.oneof(arbDuration, fc.constant(false), fc.constant(true)),
      wait: arbDuration,
      retry: arbSchedule,
      fencing: fc.constantFrom(true, false, undefined, "yes", 1, null),
      unknownField: fc.anything({ maxDepth: 1 })
    },
    { requiredKeys: [] }
  ),
  fc.constantFrom(undefined, null, 5, "options", [], true)
)

// --- the backends, side by side ---------------------------------------------------------------

let server: RedisServer
let admin: Redis
let scope: Scope.CloseableScope
let memory: LockBackendShape
let redis: LockBackendShape

const build = (layer: Layer.Layer<LockBackend, unknown>) =>
  Effect.map(Scope.extend(Layer.build(layer), scope), Context.get(LockBackend))

type Outcome =
  | { readonly _tag: "Rejected"; readonly field: string; readonly reason: string }
  | { readonly _tag: "Accepted"; readonly value: unknown }
  | { readonly _tag: "Other"; readonly text: string }

const outcome = <A>(exit: Exit.Exit<A, unknown>): Outcome => {
  if (Exit.isSuccess(exit)) return { _tag: "Accepted", value: exit.value }
  const failure = exit.cause._tag === "Fail" ? exit.cause.error : undefined
  if (typeof failure === "object" && failure !== null && (failure as { _tag?: unknown })._tag === "LockOptionsError") {
    const { field, reason } = failure as { field: string; reason: string }
    return { _tag: "Rejected", field, reason }
  }
  return { _tag: "Other", text: String(exit.cause) }
}

const dbsize = Effect.promise(() => admin.dbsize())

/**
 * Run `effect` on both backends; assert the same outcome (and nothing written to Redis when
 * rejected). Returns the outcome.
 */
const onBoth = <A>(what: string, effect: Effect.Effect<A, unknown, LockBackend>) =>
  Effect.gen(function*() {
    const before = yield* dbsize
    const onMemory = outcome(yield* Effect.exit(Effect.provideService(effect, LockBackend, memory)))
    const onRedis = outcome(yield* Effect.exit(Effect.provideService(effect, LockBackend, redis)))
    assert.deepStrictEqual(onRedis, onMemory, `parity for ${what}`)
    if (onRedis._tag === "Rejected") assert.strictEqual(yield* dbsize, before, `a rejected ${what} wrote nothing`)
    assert.notStrictEqual(onRedis._tag, "Other", `${what}: ${onRedis._tag === "Other" ? onRedis.text : ""}`)
    return onRedis
  })

let seq = 0
const fresh = (label: string) => `fuzz:${label}:${++seq}`

describe.skipIf(skipRedis(true))(`fuzzing with parity, memory and Redis (${totalRuns} runs)`, () => {
  beforeAll(async () => {
    server = await startRedisServer()
    admin = new Redis(server.url, { connectionName: "test-admin" })
    scope = Effect.runSync(Scope.make())
    ;[memory, redis] = await Effect.runPromise(
      Effect.all([build(MemoryBackend.layer), build(RedisBackend.layer({ url: server.url, prefix: "fz:" }))])
    )
  })
  afterAll(async () => {
    // SCAN: no lock left anywhere, only fencing counters (which never expire, by design).
    if (admin !== undefined) {
      const left: Array<string> = []
      let cursor = "0"
      do {
        const [next, keys] = await admin.scan(cursor, "COUNT", 1000)
        cursor = next
        left.push(...keys.filter((k) => !k.startsWith("redisson_lock_token:")))
      } while (cursor !== "0")
      assert.deepStrictEqual(left, [], "no lock left in Redis")
      admin.disconnect()
    }
    if (scope !== undefined) await Effect.runPromise(Scope.close(scope, Exit.void))
    await server?.stop()
  })

  it.effect.prop(
    "keys: same acceptance, same behaviour (free, busy, force-unlocked)",
    [arbKey],
    ([key]) =>
      Effect.gen(function*() {
        const first = yield* onBoth(
          "key",
          Lock.withLockIfAvailable(key, (lease) => Effect.succeed(lease.fencingToken > 0n))
        )
        if (first._tag !== "Accepted") return
        assert.deepStrictEqual(first.value, Option.some(true))
        // Busy under another owner: no entry, locked, force-unlock frees it.
        yield* onBoth(
          "busy key",
          Effect.gen(function*() {
            const backend = yield* LockBackend
            const taken = yield* backend.primitives.tryAcquire({
              key,
              owner: "fuzz:foreign",
              leaseMillis: 60_000,
              fencing: true
            })
            const inside = yield* Lock.withLockIfAvailable(key, Effect.void)
            const locked = yield* Lock.isLocked(key)
            const forced = yield* Lock.forceUnlock(key)
            return [taken._tag, Option.isSome(inside), locked, forced, yield* Lock.isLocked(key)]
          })
        )
      }),
    { timeout: 600_000, fastCheck: { numRuns: runs.keys } }
  )

  it.effect.prop("durations: lease, renew and wait accepted and rejected alike", [
    arbDuration,
    arbDuration,
    arbDuration
  ], (
    [lease, renew, wait]
  ) =>
    Effect.gen(function*() {
      const options = { lease, renew, wait } as unknown as LockOptions
      const key = fresh("d")
      yield* onBoth("durations", Lock.withLock(key, options)(Effect.succeed("ran")))
      yield* onBoth("durations, isLocked after", Lock.isLocked(key))
    }), { timeout: 600_000, fastCheck: { numRuns: runs.durations } })

  it.effect.prop(
    "schedules and option objects accepted and rejected alike",
    [arbOptions, arbKey],
    ([options, key]) =>
      Effect.gen(function*() {
        const k = key.length > 100 ? key : `${fresh("o")}${key}`
        yield* onBoth(
          "options",
          Lock.withLock(k, (lease) => Effect.succeed(lease.fencingToken > 0n), options as LockOptions)
        )
        yield* onBoth(
          "options, tryAcquire",
          Effect.scoped(Effect.map(Lock.tryAcquire(k, options as LockOptions), Option.isSome))
        )
      }),
    { timeout: 600_000, fastCheck: { numRuns: runs.options } }
  )
})
