/**
 * Holding several keys at once, all or none, without deadlock: the keys are taken one by one in
 * one global order (sorted, duplicates dropped), each with the mutex's own machinery (reentry of a
 * key the region holds, waiting, watchdog, loss), and what was taken is given back when a later
 * key cannot be had (its wait ran out, one attempt found it busy, the backend failed, the fiber was
 * interrupted). Two multi-locks over overlapping keys always take their common keys in the same
 * order, so neither can hold a key the other needs while waiting for one the other holds.
 *
 * `withLocks` nests one `withLock` per key around the program: a loss of any key interrupts the
 * program (through that key's guard) and the whole fails with that key's `LockLostError`; the
 * program starts only once every key is held.
 */
import type { Scope } from "effect"
import { Effect, ExecutionStrategy, Exit, Option } from "effect"
import * as Scope_ from "effect/Scope"
import type { Lease } from "../../Lock.js"
import { LockBackend } from "../../LockBackend.js"
import type { LockBackendError, LockLostError } from "../../LockError.js"
import { LockOptionsError } from "../../LockError.js"
import type { Attempt } from "../lock/enter.js"
import { enterScoped, runLocked } from "../lock/enter.js"
import type { ResolvedOptions } from "../lock/options.js"
import { validateKeyFor } from "../lock/options.js"
import { nowMillis } from "../time.js"

/** The leases of a multi-lock, one per key, in the order the keys were taken (sorted). */
export interface MultiLease {
  /** The keys, sorted, without duplicates. */
  readonly keys: ReadonlyArray<string>
  readonly leases: ReadonlyArray<Lease>
  /** Fails with the `LockLostError` of the first key lost; never succeeds. */
  readonly lost: Effect.Effect<never, LockLostError>
  /** Whether every key is still held. */
  readonly isHeld: Effect.Effect<boolean>
  /** Run an effect only while every key is held: interrupted with `LockLostError` when any is lost. */
  readonly guard: <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.Effect<A, E | LockLostError, R>
}

export type MultiProgram<A, E, R> = Effect.Effect<A, E, R> | ((lease: MultiLease) => Effect.Effect<A, E, R>)

/** The most keys one multi-lock takes. */
export const MAX_KEYS = 1000

/** The keys in the global order: validated, sorted by UTF-16 code units, duplicates dropped. */
export const orderKeys = (keys: unknown): Effect.Effect<ReadonlyArray<string>, LockOptionsError, LockBackend> =>
  Effect.gen(function*() {
    if (!Array.isArray(keys)) {
      return yield* new LockOptionsError({ field: "keys", reason: `must be an array of keys, got ${typeof keys}` })
    }
    if (keys.length === 0) return yield* new LockOptionsError({ field: "keys", reason: "must not be empty" })
    const valid: Array<string> = []
    const backend = yield* LockBackend
    for (const key of keys) valid.push(yield* validateKeyFor(backend, key))
    const sorted = Array.from(new Set(valid)).sort((a, b) => (a < b ? -1 : a > b ? 1 : 0))
    if (sorted.length > MAX_KEYS) {
      return yield* new LockOptionsError({
        field: "keys",
        reason: `holds ${sorted.length} distinct keys; the limit is ${MAX_KEYS}`
      })
    }
    return sorted
  })

const makeMultiLease = (keys: ReadonlyArray<string>, leases: ReadonlyArray<Lease>): MultiLease => ({
  keys,
  leases,
  lost: Effect.raceAll(leases.map((lease) => lease.lost)),
  isHeld: Effect.map(Effect.all(leases.map((lease) => lease.isHeld)), (held) => held.every(Boolean)),
  guard: <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E | LockLostError, R> =>
    leases.reduceRight<Effect.Effect<A, E | LockLostError, R>>((inner, lease) => lease.guard(inner), effect)
})

/** The wait left for the next key: the whole wait is one budget for all the keys. */
const remainingOptions = (options: ResolvedOptions, deadline: number, now: number): ResolvedOptions =>
  options.waitMillis === Infinity ? options : { ...options, waitMillis: Math.max(0, Math.floor(deadline - now)) }

/** `withLocks`: every key, in order, around the program. */
export const runWithLocks = <A, E, R, E2, Busy extends undefined>(
  keys: ReadonlyArray<string>,
  options: ResolvedOptions,
  attempt: Attempt<E2, Busy>,
  program: MultiProgram<A, E, R>
): Effect.Effect<A | Busy, E | E2 | LockBackendError | LockLostError, R | LockBackend> =>
  Effect.flatMap(nowMillis, (start) => {
    const deadline = start + options.waitMillis
    const step = (i: number, leases: ReadonlyArray<Lease>): Effect.Effect<
      A | Busy,
      E | E2 | LockBackendError | LockLostError,
      R | LockBackend
    > => {
      if (i === keys.length) {
        return Effect.isEffect(program) ? program : Effect.suspend(() => program(makeMultiLease(keys, leases)))
      }
      return Effect.flatMap(nowMillis, (now) =>
        Effect.map(
          runLocked(
            keys[i] as string,
            remainingOptions(options, deadline, now),
            attempt,
            (lease: Lease) => Effect.map(step(i + 1, [...leases, lease]), (result) => ({ result }))
          ),
          // A busy key (one attempt) ends the whole: the keys taken so far are released on the way out.
          (taken) => taken === undefined ? (undefined as Busy) : taken.result
        ))
    }
    return step(0, [])
  })

/**
 * `acquire`/`tryAcquire`: every key, in order, into a scope of their own that the current scope
 * closes; when one cannot be had, that scope is closed at once (what was taken is released).
 */
export const acquireAll = <E, Busy extends undefined>(
  keys: ReadonlyArray<string>,
  options: ResolvedOptions,
  attempt: Attempt<E, Busy>
): Effect.Effect<MultiLease | Busy, E | LockBackendError, LockBackend | Scope.Scope> =>
  Effect.uninterruptibleMask((restore) =>
    Effect.gen(function*() {
      const outer = yield* Effect.scope
      const inner = yield* Scope_.fork(outer, ExecutionStrategy.sequential)
      const start = yield* nowMillis
      const deadline = start + options.waitMillis
      const leases: Array<Lease> = []
      for (const key of keys) {
        const now = yield* nowMillis
        const taken = yield* restore(enterScoped(key, remainingOptions(options, deadline, now), attempt)).pipe(
          Effect.provideService(Scope_.Scope, inner),
          Effect.onExit((exit) => Exit.isFailure(exit) ? Scope_.close(inner, exit) : Effect.void)
        )
        if (taken === undefined) {
          yield* Scope_.close(inner, Exit.void)
          return undefined as Busy
        }
        leases.push(taken)
      }
      return makeMultiLease(keys, leases)
    })
  )

export const someOf = <A, E, R>(program: MultiProgram<A, E, R>): MultiProgram<Option.Option<A>, E, R> =>
  Effect.isEffect(program)
    ? Effect.map(program, Option.some)
    : (lease: MultiLease) => Effect.map(program(lease), Option.some)
