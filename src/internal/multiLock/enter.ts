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
 *
 * Taken together: where the backend can take the keys in one step (`tryAcquireAll`: memory, one
 * Redis server, or one cluster slot), the first attempt takes every key not already held by the
 * region in one all-or-nothing round trip, and the nested holds are then made from its grants
 * without another call. Only when that attempt finds a key busy (or fibers of this process already
 * queue for one) does a waiting multi-lock fall back to the ordered, one-by-one path above; a
 * single attempt (`tryAcquire`, `withLocksIfAvailable`) just reports the keys busy, holding none.
 */
import type { Fiber, Scope } from "effect"
import { Context, Effect, ExecutionStrategy, Exit, Option } from "effect"
import * as Scope_ from "effect/Scope"
import type { Lease } from "../../Lock.js"
import { LockBackend } from "../../LockBackend.js"
import type { LockRequest } from "../../LockBackend.js"
import type { LockBackendError, LockLostError } from "../../LockError.js"
import { LockOptionsError } from "../../LockError.js"
import type { Backend } from "../backend/make.js"
import { backendOf } from "../backend/make.js"
import type { Attempt } from "../lock/enter.js"
import { enterScoped, once, runLocked } from "../lock/enter.js"
import type { ResolvedOptions } from "../lock/options.js"
import { validateKeyFor } from "../lock/options.js"
import { currentRegion, findHold, newOwnerId } from "../lock/region.js"
import * as metrics from "../metrics.js"
import { nowMillis } from "../time.js"
import type { Acquired } from "../waiting/acquire.js"

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

/** A key that the all-or-nothing attempt took: its owner and grant, until a hold claims it. */
interface Grant {
  readonly owner: string
  readonly acquired: Acquired
  claimed: boolean
}

/**
 * Every key of `keys` that the region does not hold yet, taken in one step if the backend can and
 * none of them has local waiters: the grants by key, `"busy"` when a key was busy (nothing taken),
 * or `undefined` when the keys cannot be taken together here (the caller goes one by one).
 */
const takeTogether = (
  fiber: Fiber.RuntimeFiber<unknown, unknown>,
  keys: ReadonlyArray<string>,
  options: ResolvedOptions
):
  | { readonly backend: Backend; readonly taking: Effect.Effect<Map<string, Grant> | "busy", LockBackendError> }
  | undefined =>
{
  const backend = backendOf(Context.unsafeGet(fiber.currentContext, LockBackend))
  const tryAcquireAll = backend.primitives.tryAcquireAll
  if (tryAcquireAll === undefined || backend.isClosing()) return undefined
  const region = fiber.getFiberRef(currentRegion)
  const fresh = keys.filter((key) => findHold(region, backend, key) === undefined)
  if (fresh.length < 2 || fresh.some((key) => backend.queue.waitersOn(key) > 0)) return undefined
  const requests: Array<LockRequest> = fresh.map((key) => ({
    key,
    owner: newOwnerId(),
    leaseMillis: options.leaseMillis,
    fencing: options.fencing,
    waiting: false
  }))
  const call = tryAcquireAll(requests)
  if (call === undefined) return undefined
  const taking = Effect.flatMap(nowMillis, (startedAt) =>
    Effect.map(call, (result) => {
      if (result._tag === "Busy") return "busy" as const
      const grants = new Map<string, Grant>()
      requests.forEach((request, i) => {
        const fencingToken = result.fencingTokens[i] ?? 0n
        grants.set(request.key, {
          owner: request.owner,
          acquired: { fencingToken, startedAt, attempts: 1, via: "free" },
          claimed: false
        })
      })
      metrics.count(metrics.multiLockTogether, backend.labels)
      return grants
    }))
  return { backend, taking }
}

/** An attempt that hands out the grant of its key (once), or makes `otherwise`'s attempt. */
const granted = <E, Busy extends undefined>(
  grants: Map<string, Grant>,
  otherwise: Attempt<E, Busy>
): Attempt<E, Busy> =>
(backend, request, options, restore) => {
  const grant = grants.get(request.key)
  if (grant === undefined || grant.claimed || grant.owner !== request.owner) {
    return otherwise(backend, request, options, restore)
  }
  grant.claimed = true
  return Effect.succeed(grant.acquired)
}

/** Give back the grants no hold claimed (the multi-lock was interrupted or failed in between). */
const releaseUnclaimed = (backend: Backend, grants: Map<string, Grant>): Effect.Effect<void> =>
  Effect.forEach(
    Array.from(grants).filter(([, grant]) => !grant.claimed),
    ([key, grant]) =>
      Effect.catchAll(
        backend.release(key, grant.owner),
        (error) =>
          Effect.logWarning(`Releasing lock "${key}" failed (${error.message}); its lease will expire on its own`)
      ),
    { discard: true }
  )

/**
 * Take the keys together if the backend can (see `takeTogether`), then go `through` the keys with
 * an attempt that uses those grants; when they cannot be taken together go through them one by one
 * with `attempt`, and when a key was busy report `Busy` to a single attempt.
 */
const together = <A, E, R, E2, Busy extends undefined>(
  keys: ReadonlyArray<string>,
  options: ResolvedOptions,
  attempt: Attempt<E2, Busy>,
  through: (attempt: Attempt<E2, Busy>, ownerOf: (key: string) => string | undefined) => Effect.Effect<A | Busy, E, R>
): Effect.Effect<A | Busy, E | LockBackendError, R> =>
  Effect.withFiberRuntime((fiber) => {
    const taken = takeTogether(fiber, keys, options)
    if (taken === undefined) return through(attempt, () => undefined)
    return Effect.uninterruptibleMask((restore) =>
      Effect.flatMap(taken.taking, (grants): Effect.Effect<A | Busy, E | LockBackendError, R> => {
        if (grants === "busy") {
          return attempt === (once as Attempt<unknown, undefined>)
            ? Effect.succeed(undefined as Busy)
            : restore(through(attempt, () => undefined))
        }
        return Effect.onExit(
          restore(through(granted(grants, attempt), (key) => grants.get(key)?.owner)),
          () => releaseUnclaimed(taken.backend, grants)
        )
      })
    )
  })

/** `withLocks`: every key, in order, around the program. */
export const runWithLocks = <A, E, R, E2, Busy extends undefined>(
  keys: ReadonlyArray<string>,
  options: ResolvedOptions,
  attempt: Attempt<E2, Busy>,
  program: MultiProgram<A, E, R>
): Effect.Effect<A | Busy, E | E2 | LockBackendError | LockLostError, R | LockBackend> =>
  together(keys, options, attempt, (attempt, ownerOf) => oneByOne(keys, options, attempt, program, ownerOf))

const oneByOne = <A, E, R, E2, Busy extends undefined>(
  keys: ReadonlyArray<string>,
  options: ResolvedOptions,
  attempt: Attempt<E2, Busy>,
  program: MultiProgram<A, E, R>,
  ownerOf: (key: string) => string | undefined
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
            (lease: Lease) => Effect.map(step(i + 1, [...leases, lease]), (result) => ({ result })),
            undefined,
            ownerOf(keys[i] as string)
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
  together(keys, options, attempt, (attempt, ownerOf) => acquireOneByOne(keys, options, attempt, ownerOf))

const acquireOneByOne = <E, Busy extends undefined>(
  keys: ReadonlyArray<string>,
  options: ResolvedOptions,
  attempt: Attempt<E, Busy>,
  ownerOf: (key: string) => string | undefined
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
        const taken = yield* restore(
          enterScoped(key, remainingOptions(options, deadline, now), attempt, undefined, ownerOf(key))
        ).pipe(
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
