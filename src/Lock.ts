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
import type { Scope } from "effect"
import { Deferred, Effect, Exit, FiberId, FiberRef, Metric, Option } from "effect"
import type { LockBackendShape, LockInfo, LockRequest } from "./LockBackend.js"
import { LockBackend } from "./LockBackend.js"
import type { LockBackendError, LockLostError, LockOptionsError, LockTimeoutError } from "./LockError.js"
import type { Acquired } from "./internal/acquire.js"
import { acquireOnce, acquireWaiting } from "./internal/acquire.js"
import type { Hold } from "./internal/hold.js"
import { makeHold, releaseOne, runGuarded } from "./internal/hold.js"
import type { Lease } from "./internal/lease.js"
import { makeLease } from "./internal/lease.js"
import * as metrics from "./internal/metrics.js"
import type { BusyInfo, LockOptions, ResolvedOptions } from "./internal/options.js"
import { resolveOptions, validateKey } from "./internal/options.js"
import type { Owner, Pending } from "./internal/owner.js"
import { currentOwner, makeOwner } from "./internal/owner.js"
import { withSpan } from "./internal/tracing.js"
import { startWatchdog } from "./internal/watchdog.js"
import type { Restore } from "./internal/restore.js"

export type {
  /**
   * @since 0.1.0
   * @category models
   */
  BusyInfo,
  /**
   * @since 0.1.0
   * @category models
   */
  Lease,
  /**
   * @since 0.1.0
   * @category options
   */
  LockOptions
}

/**
 * Every error `withLock` adds to the program's own.
 *
 * @since 0.1.0
 * @category errors
 */
export type WithLockError = LockTimeoutError | LockLostError | LockBackendError | LockOptionsError

/**
 * The program run under a lock: an effect, or a function of the `Lease` (for its fencing token).
 *
 * @since 0.1.0
 * @category models
 */
export type Program<A, E, R> = Effect.Effect<A, E, R> | ((lease: Lease) => Effect.Effect<A, E, R>)

const makePending = (): Pending => ({ _tag: "Pending", settled: undefined })

const awaitSettled = (pending: Pending): Effect.Effect<void> =>
  Deferred.await(pending.settled ??= Deferred.unsafeMake<void>(FiberId.none))

/** How a fresh acquisition is attempted: once, or waiting. `undefined` means busy. */
type Attempt<E> = (
  backend: LockBackendShape,
  request: LockRequest,
  options: ResolvedOptions,
  restore: Restore
) => Effect.Effect<Acquired | undefined, E>

const once: Attempt<LockBackendError> = (backend, request) => Effect.map(acquireOnce(backend, request), Option.getOrUndefined)

const waiting: Attempt<LockTimeoutError | LockBackendError> = acquireWaiting

/**
 * Enter `key` for `owner`: reenter a hold the owner already has (no backend call), wait for the
 * owner's own in-flight acquisition of the key, or acquire it fresh and start its watchdog.
 * `undefined` when attempting once and busy. Must run inside `uninterruptibleMask` (only waits go
 * through `restore`); the caller must arrange `releaseOne` for the returned hold before it leaves
 * the mask.
 */
const enter = <E>(
  owner: Owner,
  key: string,
  options: ResolvedOptions,
  attempt: Attempt<E>,
  restore: Restore
): Effect.Effect<Hold | undefined, E, LockBackend> =>
  Effect.suspend(() => {
    const entry = owner.holds.get(key)
    if (entry !== undefined && entry._tag === "Hold") {
      entry.count++
      return Effect.as(Metric.increment(metrics.reentries), entry)
    }
    if (entry !== undefined) {
      return attempt === (once as Attempt<unknown>)
        ? Effect.succeed(undefined)
        : Effect.zipRight(restore(awaitSettled(entry)), enter(owner, key, options, attempt, restore))
    }
    return Effect.flatMap(LockBackend, (backend) => {
      const pending = makePending()
      owner.holds.set(key, pending)
      const request: LockRequest = { key, owner: owner.id, leaseMillis: options.leaseMillis, fencing: options.fencing }
      // The pending entry is replaced by the hold (or removed) in one synchronous step, so a
      // sibling fiber of the same owner never sees the key as free while it is being acquired.
      const settle = (hold: Hold | undefined) => {
        if (hold !== undefined) owner.holds.set(key, hold)
        else if (owner.holds.get(key) === pending) owner.holds.delete(key)
        if (pending.settled !== undefined) Deferred.unsafeDone(pending.settled, Exit.void)
        return hold
      }
      return attempt(backend, request, options, restore).pipe(
        Effect.onError(() => Effect.sync(() => settle(undefined))),
        Effect.flatMap((acquired) => {
          if (acquired === undefined) return Effect.sync(() => settle(undefined))
          const hold = settle(makeHold(owner, key, backend, options, acquired.fencingToken, acquired.startedAt))!
          return Effect.as(Effect.zipRight(startWatchdog(hold), Metric.increment(metrics.acquisitions)), hold)
        }),
        withSpan("effect-lock.acquire", { key, backend: backend.name })
      )
    })
  })

/** Enter `key`, run `program` guarded by the hold, and release: the core of `withLock`. */
const runLocked = <A, E, R, E2>(
  key: string,
  options: ResolvedOptions,
  attempt: Attempt<E2>,
  program: Program<A, E, R>
): Effect.Effect<A | undefined, E | E2 | LockLostError, R | LockBackend> =>
  Effect.flatMap(FiberRef.get(currentOwner), (current) => {
    // With no owner in scope the program gets a fresh one. Only the program's fiber (and what it
    // forks) needs to see it, so it is installed there, not around the whole call.
    const owner = current ?? makeOwner()
    const install = current === undefined ? owner : undefined
    return Effect.uninterruptibleMask((restore) =>
      Effect.flatMap(enter(owner, key, options, attempt, restore), (hold) => {
        if (hold === undefined) return Effect.succeed(undefined)
        return Effect.withFiberRuntime((fiber) => {
          // A reentry from the fiber that already runs guarded by this hold needs no guard fiber
          // of its own: a loss interrupts this very fiber, and the outer withLock reports it.
          const reentry = hold.count > 1 && hold.guarded?.has(fiber as never) === true
          const guarded = reentry
            ? restore(runProgram(program, hold))
            : runGuarded(hold, runProgram(program, hold), restore, install)
          return Effect.flatMap(Effect.exit(guarded), (exit) => Effect.zipRight(releaseOne(hold), exit))
        })
      })
    )
  })

/** Enter `key` for the rest of the current scope: the core of `acquire` and `tryAcquire`. */
const enterScoped = <E>(
  key: string,
  options: ResolvedOptions,
  attempt: Attempt<E>
): Effect.Effect<Lease | undefined, E, LockBackend | Scope.Scope> =>
  Effect.flatMap(scopedOwner, (owner) =>
    Effect.uninterruptibleMask((restore) =>
      Effect.flatMap(enter(owner, key, options, attempt, restore), (hold) =>
        hold === undefined
          ? Effect.succeed(undefined)
          : Effect.as(Effect.addFinalizer(() => releaseOne(hold)), makeLease(hold)))
    ))

/** The owner for the rest of the current scope, installing a fresh one when there is none. */
const scopedOwner: Effect.Effect<Owner, never, Scope.Scope> = Effect.flatMap(FiberRef.get(currentOwner), (owner) => {
  if (owner !== undefined) return Effect.succeed(owner)
  const fresh = makeOwner()
  return Effect.as(Effect.locallyScoped(currentOwner, fresh), fresh)
})

const validate = (key: string, options: LockOptions | undefined) =>
  Effect.zip(validateKey(key), resolveOptions(options))

const isProgram = (u: unknown): boolean => Effect.isEffect(u) || typeof u === "function"

/** The lease is only made for a program that asks for it. */
const runProgram = <A, E, R>(program: Program<A, E, R>, hold: Hold): Effect.Effect<A, E, R> =>
  typeof program === "function" ? Effect.suspend(() => program(makeLease(hold))) : program

const withLockImpl = <A, E, R>(
  key: string,
  program: Program<A, E, R>,
  options: LockOptions | undefined
): Effect.Effect<A, E | WithLockError, R | LockBackend> =>
  Effect.flatMap(validate(key, options), ([key, resolved]) =>
    runLocked(key, resolved, waiting, program) as Effect.Effect<A, E | WithLockError, R | LockBackend>)

/**
 * Run `program` while holding the lock on `key`, waiting for it as long as `options.wait` allows.
 * The lock is released when the program ends, however it ends. If the lock is lost while the
 * program runs, the program is interrupted and the result is a `LockLostError`.
 *
 * Nested `withLock` calls on a key the owner already holds enter at once, without a round trip.
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
} = function(this: unknown, ...args: ReadonlyArray<unknown>): any {
  const key = args[0] as string
  if (isProgram(args[1])) {
    return withLockImpl(key, args[1] as Program<unknown, unknown, unknown>, args[2] as LockOptions | undefined)
  }
  const options = args[1] as LockOptions | undefined
  return (program: Program<unknown, unknown, unknown>) => withLockImpl(key, program, options)
} as never

/**
 * Run `program` under the lock only if it can be had with one attempt; `None` when it is busy.
 * A key the owner already holds is entered as usual.
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
} = function(this: unknown, ...args: ReadonlyArray<unknown>): any {
  const run = (program: Program<unknown, unknown, unknown>, options: LockOptions | undefined) =>
    Effect.flatMap(validate(args[0] as string, options), ([key, resolved]) =>
      runLocked(
        key,
        resolved,
        once,
        typeof program === "function"
          ? (lease: Lease) => Effect.map(program(lease), Option.some)
          : Effect.map(program, Option.some)
      ).pipe(
        Effect.map((result) => result ?? Option.none())
      ))
  if (isProgram(args[1])) {
    return run(args[1] as Program<unknown, unknown, unknown>, args[2] as LockOptions | undefined)
  }
  return (program: Program<unknown, unknown, unknown>) => run(program, args[1] as LockOptions | undefined)
} as never

/**
 * Acquire the lock on `key` for the lifetime of the current scope, waiting as `options` allow.
 * Observe loss through `lease.lost` / `lease.guard`.
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
  Effect.flatMap(validate(key, options), ([key, resolved]) =>
    Effect.map(enterScoped(key, resolved, waiting), (lease) => lease!))

/**
 * One attempt to acquire `key` for the lifetime of the current scope; `None` when it is busy.
 *
 * @since 0.1.0
 * @category constructors
 */
export const tryAcquire = (
  key: string,
  options?: LockOptions | undefined
): Effect.Effect<Option.Option<Lease>, LockBackendError | LockOptionsError, Scope.Scope | LockBackend> =>
  Effect.flatMap(validate(key, options), ([key, resolved]) =>
    Effect.map(enterScoped(key, resolved, once), Option.fromNullable))

/**
 * The lease the current fiber's owner holds on `key`, if any.
 *
 * @since 0.1.0
 * @category getters
 */
export const currentLease = (key: string): Effect.Effect<Option.Option<Lease>> =>
  Effect.map(FiberRef.get(currentOwner), (owner) => {
    const entry = owner?.holds.get(key)
    return entry !== undefined && entry._tag === "Hold" && entry.state === "held"
      ? Option.some(makeLease(entry))
      : Option.none()
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
  Effect.flatMap(validateKey(key), (key) => Effect.flatMap(LockBackend, (backend) => backend.inspect(key)))

/**
 * Release `key` whoever holds it, and wake its waiters. An administrative escape hatch: the
 * holder finds out at its next renewal and is interrupted with `LockLostError`. `true` when a
 * lock was removed.
 *
 * @since 0.1.0
 * @category admin
 */
export const forceUnlock = (key: string): Effect.Effect<boolean, LockBackendError | LockOptionsError, LockBackend> =>
  Effect.flatMap(validateKey(key), (key) =>
    Effect.flatMap(LockBackend, (backend) =>
      backend.forceRelease(key).pipe(withSpan("effect-lock.forceUnlock", { key, backend: backend.name }))))
