/**
 * A fair lock: first come, first served across every process and fiber. Waiters get the lock in
 * the order they started waiting; a waiter that stops waiting (timed out, interrupted, or its
 * process died) loses its place, after its wait window (5 seconds) at the latest. Otherwise it has
 * the shapes and guarantees of `Lock`: leases renewed by a watchdog, fencing tokens, loss that
 * interrupts the program with `LockLostError`, reentrancy within the region that holds it.
 *
 * On Redis it speaks Redisson's `RedissonFairLock` layout (the lock hash at the name, the queue
 * `redisson_lock_queue:{name}`, the deadlines `redisson_lock_timeout:{name}`, a channel per waiting
 * owner), so Java services on Redisson's fair lock and effect-lock wait in one line. See
 * `docs/fair-lock.md`.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { FairLock, MemoryBackend } from "effect-lock"
 *
 * const job = (n: number) => FairLock.withLock("reports", Effect.log(`job ${n}`))
 * Effect.runPromise(
 *   Effect.forEach([1, 2, 3], job, { concurrency: "unbounded" }).pipe(Effect.provide(MemoryBackend.layer))
 * )
 * ```
 *
 * @since 0.3.0
 */
import type { Effect, Option, Scope } from "effect"
import type { KindEntry } from "./internal/lock/enter.js"
import { makeAcquire, makeTryAcquire, makeWithLock } from "./internal/lock/family.js"
import type { Lease, LockOptions, NotAnAsyncFunction, Program, WithLockError } from "./Lock.js"
import type { LockBackend } from "./LockBackend.js"
import type { LockBackendError, LockOptionsError, LockTimeoutError } from "./LockError.js"

const entry: KindEntry<never> = { kind: "fair" }

/**
 * Run `program` while holding the fair lock on `key`, waiting in line for it as long as
 * `options.wait` allows. All the forms of `Lock.withLock`: key first with the program, or
 * data-last (`program.pipe(FairLock.withLock(key, options))`); the program may be a function of
 * the `Lease`.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { FairLock } from "effect-lock"
 *
 * const work = Effect.log("my turn")
 * const a = FairLock.withLock("queue:reports", work, { wait: "30 seconds" })
 * const b = work.pipe(FairLock.withLock("queue:reports"))
 * const c = FairLock.withLock("queue:reports", (lease) => Effect.log(`token ${lease.fencingToken}`))
 * ```
 *
 * @since 0.3.0
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
} = makeWithLock(entry) as never

/**
 * Wait in line for the fair lock on `key` and hold it for the rest of the current scope. Observe
 * loss through `lease.lost` / `lease.guard`.
 *
 * @since 0.3.0
 * @category constructors
 */
export const acquire: (
  key: string,
  options?: LockOptions | undefined
) => Effect.Effect<Lease, LockTimeoutError | LockBackendError | LockOptionsError, Scope.Scope | LockBackend> =
  makeAcquire(entry)

/**
 * One attempt at the fair lock on `key`, for the rest of the current scope: `None` when it is held,
 * or when somebody is already waiting in line (a fair lock lets nobody jump the queue). It never
 * joins the queue.
 *
 * @since 0.3.0
 * @category constructors
 */
export const tryAcquire: (
  key: string,
  options?: LockOptions | undefined
) => Effect.Effect<Option.Option<Lease>, LockBackendError | LockOptionsError, Scope.Scope | LockBackend> =
  makeTryAcquire(entry)
