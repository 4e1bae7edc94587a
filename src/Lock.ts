/**
 * Distributed locks as scoped Effect resources.
 *
 * ```ts
 * import { Effect } from "effect"
 * import { Lock, MemoryBackend, withLock } from "effect-lock"
 *
 * const program = Effect.log("only one of us at a time")
 *
 * Effect.scoped(withLock("orders:42", program))
 * withLock("orders:42", program, { lease: "10 seconds", wait: "5 seconds" })
 * program.pipe(Lock.withLock("orders:42", { wait: "5 seconds" }))
 * withLock("orders:42", (lease) => Effect.log(`token ${lease.fencingToken}`))
 *   .pipe(Effect.provide(MemoryBackend.layer))
 * ```
 *
 * @since 0.1.0
 */
import type { Duration, Schedule, Scope } from "effect"
import { Effect, FiberRef, Option } from "effect"
import { enterScopedOf, once, waiting, withLockOf } from "./internal/lock/enter.js"
import { makeLease } from "./internal/lock/lease.js"
import { validateKeyFor } from "./internal/lock/options.js"
import { currentRegion, findKey } from "./internal/lock/region.js"
import { withSpan } from "./internal/tracing.js"
import { LockBackend } from "./LockBackend.js"
import type { LockInfo } from "./LockBackend.js"
import type { LockBackendError, LockLostError, LockOptionsError, LockTimeoutError } from "./LockError.js"

/**
 * @since 0.1.0
 * @category options
 */
export interface LockOptions {
  /**
   * How long the lease lasts without renewal: a whole number of milliseconds, at most 2^31 - 1
   * (24.8 days). Default 30 seconds.
   */
  readonly lease?: Duration.DurationInput | undefined
  /**
   * Renew the lease in the background while the lock is held. `true` (default) renews every
   * lease/3; a duration renews at that period; `false` lets the lease end on its own, and losing it
   * then interrupts the program. A renewal must come due at least one drift margin before the local
   * deadline: the period is at most `lease - 2 × drift` (drift = 1 % of the lease + 2 ms), so that a
   * backend that answers never loses the lock.
   */
  readonly renew?: boolean | Duration.DurationInput | undefined
  /**
   * How long to wait for the lock: a whole number of milliseconds, or `Infinity`. Default: no limit
   * (the wait stays interruptible).
   */
  readonly wait?: Duration.DurationInput | undefined
  /**
   * The schedule between attempts while waiting. Release notifications and the holder's remaining
   * lease wake the waiter earlier; the schedule is the safety net. When it stops recurring, the
   * acquisition fails with `LockTimeoutError` (`reason: "retries-exhausted"`). Its input is a
   * {@link BusyInfo}. Default: exponential from 20 ms, doubling, capped at 1 s, jittered.
   */
  readonly retry?: Schedule.Schedule<unknown, BusyInfo> | undefined
  /** Draw a fencing token on every fresh acquisition. Default true. */
  readonly fencing?: boolean | undefined
}

/**
 * What the retry schedule is fed after each failed attempt.
 *
 * @since 0.1.0
 * @category options
 */
export interface BusyInfo {
  readonly key: string
  readonly attempt: number
  /** The holder's remaining lease, `undefined` when the lock has no expiry. */
  readonly holderTtlMillis: number | undefined
}

/**
 * A held lock, as the program inside it sees it.
 *
 * @since 0.1.0
 * @category models
 */
export interface Lease {
  readonly key: string
  /** The owner id sent to the backend, `<process uuid>:<n>`: fresh per hold, shared by its reentries. */
  readonly owner: string
  /**
   * Strictly increasing per key across every client, issued on each fresh acquisition (a reentry
   * shares its outer lease's token). `0n` when the lock was taken with `fencing: false`.
   */
  readonly fencingToken: bigint
  /** How many times the owner had entered the lock when this lease was handed out (1 = outermost). */
  readonly holdCount: number
  /** Clock time (ms) at which the acquiring round trip started. */
  readonly acquiredAt: number
  /**
   * Fails with `LockLostError` when the lock is lost (or, with reason `released`, once its scope
   * has released it); never succeeds.
   */
  readonly lost: Effect.Effect<never, LockLostError>
  /** Whether the lock is still held: not lost, not released, and its local deadline not passed. */
  readonly isHeld: Effect.Effect<boolean>
  /** Time left until the local deadline, in whole milliseconds (zero once lost or released). */
  readonly remaining: Effect.Effect<Duration.Duration>
  /**
   * Run an effect only while the lock is held: it is interrupted with `LockLostError` on loss, and
   * refused (`LockLostError`, reason `released`) once the lease's scope has released it.
   */
  readonly guard: <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.Effect<A, E | LockLostError, R>
}

/**
 * The program run under a lock: an effect, or a function of the `Lease` (for its fencing token).
 * An effect that is also callable (a `Context.Tag`) runs as an effect.
 *
 * @since 0.1.0
 * @category models
 */
export type Program<A, E, R> = Effect.Effect<A, E, R> | ((lease: Lease) => Effect.Effect<A, E, R>)

/**
 * What the type checker names when `withLock` is given an async function: the program must be an
 * Effect (or a function of the lease that returns one).
 *
 * @since 0.2.0
 * @category models
 */
export type NotAnAsyncFunction =
  "withLock runs an Effect, not an async function: pass (lease) => Effect.tryPromise((signal) => work(signal, lease)), or call it from promise code with LockClient.make(layer).using(key, async (signal, lease) => ...)"

/**
 * A promise-facing client over a backend layer: `makeClient(layer).using(key, async (signal, lease)
 * => ...)`. The same as `LockClient.make`.
 *
 * @since 0.2.0
 * @category constructors
 */
export { make as makeClient } from "./LockClient.js"

/**
 * Every error `withLock` adds to the program's own.
 *
 * @since 0.1.0
 * @category errors
 */
export type WithLockError = LockTimeoutError | LockLostError | LockBackendError | LockOptionsError

const isProgram = (u: unknown): boolean => Effect.isEffect(u) || typeof u === "function"

const withLockImpl = <A, E, R>(
  key: string,
  program: Program<A, E, R>,
  options: LockOptions | undefined
): Effect.Effect<A, E | WithLockError, R | LockBackend> => withLockOf(key, options, waiting, program)

/**
 * Run `program` while holding the lock on `key`, waiting for it as long as `options.wait` allows.
 * The lock is released when the program ends, however it ends. If the lock is lost while the
 * program runs, the program is interrupted and the result is a `LockLostError`.
 *
 * The hold belongs to the program: the program and the fibers it forks reenter `key` at once,
 * without a round trip; any other fiber, even a sibling inside another lock's program, waits.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { Lock, MemoryBackend, withLock } from "effect-lock"
 *
 * const charge = Effect.log("charging")
 * const once = withLock("payments:7", charge, { wait: "5 seconds" })
 * const piped = charge.pipe(Lock.withLock("payments:7", { lease: "10 seconds" }))
 * Effect.runPromise(Effect.provide(Effect.zip(once, piped), MemoryBackend.layer))
 * ```
 *
 * @since 0.1.0
 * @category combinators
 */
export const withLock: {
  <A, E, R>(
    key: string,
    program: Program<A, E, R>,
    options?: LockOptions | undefined
  ): Effect.Effect<A, E | WithLockError, R | LockBackend>
  (
    key: string,
    options?: LockOptions | undefined
  ): <A, E, R>(program: Program<A, E, R>) => Effect.Effect<A, E | WithLockError, R | LockBackend>
  /** Not an overload to call: it is here so that passing an async function explains itself. */
  (key: string, program: NotAnAsyncFunction, options?: LockOptions | undefined): never
} = function(...args: ReadonlyArray<unknown>) {
  const key = args[0] as string
  if (isProgram(args[1])) {
    return withLockImpl(key, args[1] as Program<unknown, unknown, unknown>, args[2] as LockOptions | undefined)
  }
  const options = args[1] as LockOptions | undefined
  return (program: Program<unknown, unknown, unknown>) => withLockImpl(key, program, options)
} as never

const someOf = <A, E, R>(program: Program<A, E, R>): Program<Option.Option<A>, E, R> =>
  Effect.isEffect(program)
    ? Effect.map(program, Option.some)
    : (lease: Lease) => Effect.map(program(lease), Option.some)

/**
 * Run `program` under the lock only if it can be had with one attempt; `None` when it is busy.
 * A key the region already holds is reentered as usual.
 *
 * @since 0.1.0
 * @category combinators
 */
export const withLockIfAvailable: {
  <A, E, R>(
    key: string,
    program: Program<A, E, R>,
    options?: LockOptions | undefined
  ): Effect.Effect<Option.Option<A>, E | Exclude<WithLockError, LockTimeoutError>, R | LockBackend>
  (
    key: string,
    options?: LockOptions | undefined
  ): <A, E, R>(
    program: Program<A, E, R>
  ) => Effect.Effect<Option.Option<A>, E | Exclude<WithLockError, LockTimeoutError>, R | LockBackend>
} = function(...args: ReadonlyArray<unknown>) {
  const run = (program: Program<unknown, unknown, unknown>, options: LockOptions | undefined) =>
    Effect.map(withLockOf(args[0] as string, options, once, someOf(program)), (result) => result ?? Option.none())
  if (isProgram(args[1])) {
    return run(args[1] as Program<unknown, unknown, unknown>, args[2] as LockOptions | undefined)
  }
  return (program: Program<unknown, unknown, unknown>) => run(program, args[1] as LockOptions | undefined)
} as never

/**
 * Acquire the lock on `key` for the rest of the current scope, waiting as `options` allow. The
 * scope is the hold's region: fibers running in it (and fibers that acquired into it concurrently,
 * once joined) reenter at once. Observe loss through `lease.lost` / `lease.guard`.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { Lock } from "effect-lock"
 *
 * const job = Effect.scoped(
 *   Effect.gen(function*() {
 *     const lease = yield* Lock.acquire("reports:daily", { wait: "1 minute" })
 *     yield* lease.guard(Effect.log(`building with token ${lease.fencingToken}`))
 *   })
 * )
 * ```
 *
 * @since 0.1.0
 * @category constructors
 */
export const acquire = (
  key: string,
  options?: LockOptions | undefined
): Effect.Effect<Lease, LockTimeoutError | LockBackendError | LockOptionsError, Scope.Scope | LockBackend> =>
  enterScopedOf(key, options, waiting)

/**
 * One attempt to acquire `key` for the rest of the current scope; `None` when it is busy.
 *
 * @since 0.1.0
 * @category constructors
 */
export const tryAcquire = (
  key: string,
  options?: LockOptions | undefined
): Effect.Effect<Option.Option<Lease>, LockBackendError | LockOptionsError, Scope.Scope | LockBackend> =>
  Effect.map(enterScopedOf(key, options, once), Option.fromNullable)

/**
 * The lease the current fiber may reenter on `key`, if any: the innermost hold of its region on
 * that key (on whichever backend holds it).
 *
 * @since 0.1.0
 * @category getters
 */
export const currentLease = (key: string): Effect.Effect<Option.Option<Lease>> =>
  Effect.map(FiberRef.get(currentRegion), (region) => {
    const hold = findKey(region, key)
    return hold === undefined ? Option.none() : Option.some(makeLease(hold))
  })

/**
 * Whether anybody holds `key` right now, as the backend sees it.
 *
 * @since 0.1.0
 * @category getters
 */
export const isLocked = (key: string): Effect.Effect<boolean, LockBackendError | LockOptionsError, LockBackend> =>
  Effect.map(inspect(key), Option.isSome)

/**
 * What the backend knows about `key`: holders, hold counts and remaining lease.
 *
 * @since 0.1.0
 * @category getters
 */
export const inspect = (
  key: string
): Effect.Effect<Option.Option<LockInfo>, LockBackendError | LockOptionsError, LockBackend> =>
  Effect.flatMap(
    LockBackend,
    (backend) => Effect.flatMap(validateKeyFor(backend, key), (key) => backend.primitives.inspect(key))
  )

/**
 * Release `key` whoever holds it, and wake its waiters. An administrative escape hatch: the
 * holder finds out at its next renewal and is interrupted with `LockLostError`. `true` when a
 * lock was removed.
 *
 * @since 0.1.0
 * @category admin
 */
export const forceUnlock = (key: string): Effect.Effect<boolean, LockBackendError | LockOptionsError, LockBackend> =>
  Effect.flatMap(
    LockBackend,
    (backend) =>
      Effect.flatMap(
        validateKeyFor(backend, key),
        (key) =>
          backend.primitives.forceRelease(key).pipe(withSpan("effect-lock.forceUnlock", { key, backend: backend.name }))
      )
  )
