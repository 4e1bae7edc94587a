/**
 * Several locks at once, all or none: `withLocks(["accounts:1", "accounts:2"], program)` runs the
 * program only once every key is held, and never leaves a strict subset held after a failure. The
 * keys are taken in one global order (sorted), so two multi-locks over overlapping keys never
 * deadlock. Every key is an ordinary lock (the mutex's layout, watchdog, fencing token), so a
 * multi-lock excludes `withLock` on any of its keys, reenters keys its region already holds, and a
 * loss of any key interrupts the program with that key's `LockLostError`. See
 * `docs/multi-lock.md`.
 *
 * ```ts
 * import { Effect } from "effect"
 * import { MemoryBackend, MultiLock } from "effect-lock"
 *
 * const transfer = Effect.log("moving 10 from 1 to 2")
 *
 * Effect.scoped(MultiLock.withLocks(["accounts:1", "accounts:2"], transfer))
 * MultiLock.withLocks(["accounts:1", "accounts:2"], transfer, { wait: "5 seconds" })
 * transfer.pipe(MultiLock.withLocks(["accounts:1", "accounts:2"], { lease: "10 seconds" }))
 * MultiLock.withLocks(["accounts:1", "accounts:2"], (lease) => Effect.log(lease.keys.join(", ")))
 *   .pipe(Effect.provide(MemoryBackend.layer))
 * ```
 *
 * @since 0.3.0
 */
import type { Scope } from "effect"
import { Effect, Option } from "effect"
import { once, waiting } from "./internal/lock/enter.js"
import { resolveOptions } from "./internal/lock/options.js"
import type { MultiLease, MultiProgram } from "./internal/multiLock/enter.js"
import { acquireAll, orderKeys, runWithLocks, someOf } from "./internal/multiLock/enter.js"
import type { LockOptions } from "./Lock.js"
import type { LockBackend } from "./LockBackend.js"
import type { LockBackendError, LockLostError, LockOptionsError, LockTimeoutError } from "./LockError.js"

export type {
  /**
   * @since 0.3.0
   * @category models
   */
  MultiLease,
  /**
   * @since 0.3.0
   * @category models
   */
  MultiProgram
}

/**
 * Every error `withLocks` adds to the program's own.
 *
 * @since 0.3.0
 * @category errors
 */
export type WithLocksError = LockTimeoutError | LockLostError | LockBackendError | LockOptionsError

const validate = (keys: ReadonlyArray<string>, options: LockOptions | undefined) =>
  Effect.zip(orderKeys(keys), resolveOptions(options))

const isProgram = (u: unknown): boolean => Effect.isEffect(u) || typeof u === "function"

/**
 * Run `program` holding every key of `keys` (sorted, duplicates dropped), waiting as long as
 * `options.wait` allows: one budget for all the keys together. The options apply to every key.
 * When a key cannot be had in time, the keys taken so far are released and the result is a
 * `LockTimeoutError` naming that key. When any key is lost while the program runs, the program is
 * interrupted and the result is that key's `LockLostError`.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { MemoryBackend, MultiLock } from "effect-lock"
 *
 * const transfer = (from: string, to: string) =>
 *   MultiLock.withLocks([`accounts:${from}`, `accounts:${to}`], Effect.log(`${from} -> ${to}`), {
 *     wait: "5 seconds"
 *   })
 * Effect.runPromise(Effect.provide(Effect.all([transfer("a", "b"), transfer("b", "a")], { concurrency: 2 }), MemoryBackend.layer))
 * ```
 *
 * @since 0.3.0
 * @category combinators
 */
export const withLocks: {
  <A, E, R>(
    keys: ReadonlyArray<string>,
    program: MultiProgram<A, E, R>,
    options?: LockOptions | undefined
  ): Effect.Effect<A, E | WithLocksError, R | LockBackend>
  (
    keys: ReadonlyArray<string>,
    options?: LockOptions | undefined
  ): <A, E, R>(program: MultiProgram<A, E, R>) => Effect.Effect<A, E | WithLocksError, R | LockBackend>
} = function(...args: ReadonlyArray<unknown>) {
  const keys = args[0] as ReadonlyArray<string>
  const run = (program: MultiProgram<unknown, unknown, unknown>, options: LockOptions | undefined) =>
    Effect.flatMap(validate(keys, options), ([keys, resolved]) => runWithLocks(keys, resolved, waiting, program))
  if (isProgram(args[1])) {
    return run(args[1] as MultiProgram<unknown, unknown, unknown>, args[2] as LockOptions | undefined)
  }
  return (program: MultiProgram<unknown, unknown, unknown>) => run(program, args[1] as LockOptions | undefined)
} as never

/**
 * Run `program` holding every key only if each can be had with one attempt; `None` (and nothing
 * held) when any is busy.
 *
 * @since 0.3.0
 * @category combinators
 */
export const withLocksIfAvailable: {
  <A, E, R>(
    keys: ReadonlyArray<string>,
    program: MultiProgram<A, E, R>,
    options?: LockOptions | undefined
  ): Effect.Effect<Option.Option<A>, E | Exclude<WithLocksError, LockTimeoutError>, R | LockBackend>
  (
    keys: ReadonlyArray<string>,
    options?: LockOptions | undefined
  ): <A, E, R>(
    program: MultiProgram<A, E, R>
  ) => Effect.Effect<Option.Option<A>, E | Exclude<WithLocksError, LockTimeoutError>, R | LockBackend>
} = function(...args: ReadonlyArray<unknown>) {
  const keys = args[0] as ReadonlyArray<string>
  const run = (program: MultiProgram<unknown, unknown, unknown>, options: LockOptions | undefined) =>
    Effect.flatMap(
      validate(keys, options),
      ([keys, resolved]) =>
        Effect.map(runWithLocks(keys, resolved, once, someOf(program)), (result) => result ?? Option.none())
    )
  if (isProgram(args[1])) {
    return run(args[1] as MultiProgram<unknown, unknown, unknown>, args[2] as LockOptions | undefined)
  }
  return (program: MultiProgram<unknown, unknown, unknown>) => run(program, args[1] as LockOptions | undefined)
} as never

/**
 * Take every key for the rest of the current scope, waiting as `options` allow; all or none.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { MultiLock } from "effect-lock"
 *
 * const job = Effect.scoped(
 *   Effect.gen(function*() {
 *     const lease = yield* MultiLock.acquire(["stock:apples", "stock:pears"], { wait: "10 seconds" })
 *     yield* lease.guard(Effect.log(`holding ${lease.keys.length} keys`))
 *   })
 * )
 * ```
 *
 * @since 0.3.0
 * @category constructors
 */
export const acquire = (
  keys: ReadonlyArray<string>,
  options?: LockOptions | undefined
): Effect.Effect<MultiLease, LockTimeoutError | LockBackendError | LockOptionsError, Scope.Scope | LockBackend> =>
  Effect.flatMap(validate(keys, options), ([keys, resolved]) => acquireAll(keys, resolved, waiting))

/**
 * One attempt at each key for the rest of the current scope; `None` (and nothing held) when any is
 * busy.
 *
 * @since 0.3.0
 * @category constructors
 */
export const tryAcquire = (
  keys: ReadonlyArray<string>,
  options?: LockOptions | undefined
): Effect.Effect<Option.Option<MultiLease>, LockBackendError | LockOptionsError, Scope.Scope | LockBackend> =>
  Effect.flatMap(
    validate(keys, options),
    ([keys, resolved]) => Effect.map(acquireAll(keys, resolved, once), Option.fromNullable)
  )
