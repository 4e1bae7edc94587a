/**
 * The shapes every member of the lock family shares (DESIGN §8), written once: `withX` in all its
 * forms (key first with the program, or data-last and pipeable; the program an Effect or a function
 * of the `Lease`), `acquire` and `tryAcquire` into the current scope. A member supplies the kind it
 * enters (`KindEntry`); everything else is the mutex's machinery.
 */
import type { Scope } from "effect"
import { Effect, Option } from "effect"
import type { Lease, LockOptions, Program, WithLockError } from "../../Lock.js"
import type { LockBackend } from "../../LockBackend.js"
import type { LockBackendError, LockOptionsError, LockTimeoutError } from "../../LockError.js"
import type { KindEntry } from "./enter.js"
import { enterScopedOf, once, waiting, withLockOf } from "./enter.js"

const isProgram = (u: unknown): boolean => Effect.isEffect(u) || typeof u === "function"

/** `withX(key, program, options?)` and `withX(key, options?)(program)`, waiting for the lock. */
export const makeWithLock = <EK>(entry: KindEntry<EK>) => {
  const run = <A, E, R>(
    key: string,
    program: Program<A, E, R>,
    options: LockOptions | undefined
  ): Effect.Effect<A, E | EK | WithLockError, R | LockBackend> => withLockOf(key, options, waiting, program, entry)
  return function(...args: ReadonlyArray<unknown>) {
    const key = args[0] as string
    if (isProgram(args[1])) {
      return run(key, args[1] as Program<unknown, unknown, unknown>, args[2] as LockOptions | undefined)
    }
    const options = args[1] as LockOptions | undefined
    return (program: Program<unknown, unknown, unknown>) => run(key, program, options)
  }
}

/** `acquire(key, options?)`: held until the current scope closes. */
export const makeAcquire = <EK>(entry: KindEntry<EK>) =>
(
  key: string,
  options?: LockOptions | undefined
): Effect.Effect<Lease, EK | LockTimeoutError | LockBackendError | LockOptionsError, Scope.Scope | LockBackend> =>
  enterScopedOf(key, options, waiting, entry)

/** `tryAcquire(key, options?)`: one attempt; `None` when busy. */
export const makeTryAcquire = <EK>(entry: KindEntry<EK>) =>
(
  key: string,
  options?: LockOptions | undefined
): Effect.Effect<Option.Option<Lease>, EK | LockBackendError | LockOptionsError, Scope.Scope | LockBackend> =>
  Effect.map(enterScopedOf(key, options, once, entry), Option.fromNullable)
