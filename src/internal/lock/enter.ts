/**
 * Entering a lock: reenter a hold of the current region (no backend call), or acquire fresh (one
 * attempt, or waiting), then watch the hold (its watchdog belongs to the hold's scope) and release
 * it when its region ends: after the program for `withLock`, when the caller's scope closes for
 * `Lock.acquire`.
 */
import type { Fiber } from "effect"
import { Context, Effect, FiberRef, Scope } from "effect"
import type { Lease, LockOptions, Program } from "../../Lock.js"
import type { LockRequest } from "../../LockBackend.js"
import { LockBackend } from "../../LockBackend.js"
import type { LockLostError, LockOptionsError, LockTimeoutError } from "../../LockError.js"
import { LockBackendError } from "../../LockError.js"
import type { KindName } from "../../LockKinds.js"
import type { Backend } from "../backend/make.js"
import { backendOf, kindOf } from "../backend/make.js"
import * as metrics from "../metrics.js"
import type { Restore } from "../restore.js"
import { isTracing } from "../tracing.js"
import type { Acquired } from "../waiting/acquire.js"
import { acquireOnce, acquireWaiting } from "../waiting/acquire.js"
import { runGuarded } from "./guard.js"
import type { Hold } from "./hold.js"
import { releaseHold } from "./hold.js"
import { makeLease } from "./lease.js"
import type { ResolvedOptions } from "./options.js"
import { keyErrorFor, resolvedBefore, resolveOptions } from "./options.js"
import type { Region } from "./region.js"
import { currentRegion, extend, findHold, newOwnerId, without } from "./region.js"
import { holdAcquired } from "./watchdog.js"

/**
 * How a fresh acquisition is attempted: once (`Busy` is `undefined`: it may find the lock busy), or
 * waiting (`Busy` is `never`: it ends holding the lock, or fails).
 */
export type Attempt<E, Busy extends undefined> = (
  backend: Backend,
  request: LockRequest,
  options: ResolvedOptions,
  restore: Restore
) => Effect.Effect<Acquired | Busy, E>

export const once: Attempt<LockBackendError, undefined> = acquireOnce

export const waiting: Attempt<LockTimeoutError | LockBackendError, never> = acquireWaiting

/**
 * A program that is an Effect runs as one, even when it is callable too (a `Context.Tag` is both);
 * the lease is made only for a program that asks for it.
 */
export const runProgram = <A, E, R>(program: Program<A, E, R>, hold: Hold): Effect.Effect<A, E, R> =>
  Effect.isEffect(program) ? program : Effect.suspend(() => program(makeLease(hold)))

/**
 * A fresh hold on `key`, or `undefined` when attempting once and busy. Called inside
 * `uninterruptibleMask`, when the acquisition starts.
 */
const acquireFresh = <E, Busy extends undefined>(
  backend: Backend,
  key: string,
  options: ResolvedOptions,
  attempt: Attempt<E, Busy>,
  restore: Restore,
  scope: Scope.Scope | undefined,
  fiber: Fiber.RuntimeFiber<unknown, unknown>,
  owner: string | undefined
): Effect.Effect<Hold | Busy, E> => {
  const request: LockRequest = {
    key,
    owner: owner ?? newOwnerId(),
    leaseMillis: options.leaseMillis,
    fencing: options.fencing,
    waiting: attempt !== once && options.waitMillis > 0
  }
  const held = (acquired: Acquired): Hold =>
    holdAcquired(backend, backend, request, options, acquired, scope, fiber.getFiberRef(FiberRef.currentLogAnnotations))
  if (!isTracing(fiber)) {
    return Effect.map(
      attempt(backend, request, options, restore),
      (acquired): Hold | Busy => acquired === undefined ? acquired as Busy : held(acquired)
    )
  }
  return traced(backend, request, attempt(backend, request, options, restore), held)
}

const attributesOf = (backend: Backend, request: LockRequest) => ({
  "effect_lock.key": request.key,
  "effect_lock.backend": backend.name,
  "effect_lock.owner": request.owner
})

/**
 * An acquisition with a tracer installed: the `effect-lock.acquire` span (how many attempts, how
 * the lock was got), then the `effect-lock.hold` span, which lasts until the release and links to
 * the hold that handed the lock over, if one did.
 */
const traced = <E, Busy extends undefined>(
  backend: Backend,
  request: LockRequest,
  acquiring: Effect.Effect<Acquired | Busy, E>,
  held: (acquired: Acquired) => Hold
): Effect.Effect<Hold | Busy, E> =>
  Effect.withSpan(
    Effect.tap(acquiring, (acquired) =>
      acquired === undefined
        ? Effect.annotateCurrentSpan("effect_lock.acquired", false)
        : Effect.annotateCurrentSpan({
          "effect_lock.acquired": true,
          "effect_lock.attempts": acquired.attempts,
          "effect_lock.via": acquired.via,
          "effect_lock.fencing_token": acquired.fencingToken.toString()
        })),
    "effect-lock.acquire",
    { attributes: attributesOf(backend, request), captureStackTrace: false }
  ).pipe(
    Effect.flatMap((acquired): Effect.Effect<Hold | Busy> => {
      if (acquired === undefined) return Effect.succeed(acquired as Busy)
      const links = acquired.from === undefined
        ? []
        : [{ _tag: "SpanLink" as const, span: acquired.from, attributes: { "effect_lock.link": "handed over by" } }]
      return Effect.map(
        Effect.makeSpan("effect-lock.hold", {
          attributes: {
            ...attributesOf(backend, request),
            "effect_lock.fencing_token": acquired.fencingToken.toString()
          },
          links
        }),
        (span) => {
          const hold = held(acquired)
          hold.span = span
          return hold
        }
      )
    })
  )

/** Run `program` as a reentry into `hold`: no backend call, and the hold's guard still applies. */
const reenter = <A, E, R>(
  hold: Hold,
  program: Program<A, E, R>,
  fiber: Fiber.RuntimeFiber<unknown, unknown>
): Effect.Effect<A, E | LockLostError, R> =>
  Effect.uninterruptibleMask((restore) => {
    hold.count++
    metrics.count(metrics.reentries, hold.backend.labels)
    // From the fiber that already runs guarded by this hold no guard fiber of its own is needed:
    // a loss interrupts this very fiber, and the outer withLock reports it.
    const inPlace = hold.guarded?.has(fiber) === true || hold.starting === fiber.id()
    const run = inPlace ? restore(runProgram(program, hold)) : runGuarded(hold, runProgram(program, hold), restore)
    return Effect.matchCauseEffect(run, {
      onFailure: (cause) => {
        hold.count--
        return Effect.failCause(cause)
      },
      onSuccess: (value) => {
        hold.count--
        return Effect.succeed(value)
      }
    })
  })

/**
 * How a lock kind other than the mutex enters (`FairLock`, `ReadWriteLock`): through the machinery
 * the backend built for `kind`, and, before a fresh acquisition, `check` (given the backend service
 * itself, whose `kinds` it may look into) may refuse (an upgrade
 * from a read lock) or name the owner to reuse (a read lock taken under one's own write lock).
 */
export interface KindEntry<EK> {
  readonly kind: KindName
  readonly check?:
    | ((region: Region | undefined, base: Backend, key: string) => EK | { readonly owner: string } | undefined)
    | undefined
}

/** The backend to enter (the kind's, when given), and the owner a fresh hold reuses, or the refusal. */
const entering = <EK>(
  fiber: Fiber.RuntimeFiber<unknown, unknown>,
  key: string,
  entry: KindEntry<EK> | undefined
): { readonly backend: Backend; readonly base: Backend; readonly check: KindEntry<EK>["check"] } | LockBackendError => {
  const base = backendOf(Context.unsafeGet(fiber.currentContext, LockBackend))
  if (entry === undefined) return { backend: base, base, check: undefined }
  const backend = kindOf(base, entry.kind, key)
  return backend instanceof LockBackendError ? backend : { backend, base, check: entry.check }
}

const checked = <EK>(
  check: KindEntry<EK>["check"],
  region: Region | undefined,
  backend: Backend,
  key: string
): { readonly owner: string | undefined } | EK => {
  if (check === undefined) return { owner: undefined }
  const result = check(region, backend, key)
  return result === undefined ? { owner: undefined } : result
}

const isOwner = (u: unknown): u is { readonly owner: string | undefined } =>
  typeof u === "object" && u !== null && !(u instanceof Error) && "owner" in u

/**
 * Enter `key`, run `program` guarded by the hold, and release: the core of `withLock`. A fresh hold
 * uses `owner` when given (a lock that `MultiLock` took together with others under that owner).
 */
export const runLocked = <A, E, R, E2, Busy extends undefined, EK = never>(
  key: string,
  options: ResolvedOptions,
  attempt: Attempt<E2, Busy>,
  program: Program<A, E, R>,
  entry?: KindEntry<EK> | undefined,
  owner?: string | undefined
): Effect.Effect<A | Busy, E | E2 | EK | LockBackendError | LockLostError, R | LockBackend> =>
  // The backend and the region are read from the fiber synchronously: this is the hot path.
  Effect.withFiberRuntime((fiber) => runLockedIn(fiber, key, options, attempt, program, entry, owner))

/**
 * `runLocked` with the key checked against the backend and the options resolved first (a
 * `LockOptionsError` otherwise, before anything is sent): what the public `withLock`s call. Options
 * seen before (the same object, or none) are not resolved again, so the usual call takes one step
 * of the run loop before the acquisition.
 */
export const withLockOf = <A, E, R, E2, Busy extends undefined, EK = never>(
  key: string,
  options: LockOptions | undefined,
  attempt: Attempt<E2, Busy>,
  program: Program<A, E, R>,
  entry?: KindEntry<EK> | undefined
): Effect.Effect<A | Busy, E | E2 | EK | LockBackendError | LockLostError | LockOptionsError, R | LockBackend> =>
  Effect.withFiberRuntime((fiber) =>
    validated(fiber, key, options, (resolved) => runLockedIn(fiber, key, resolved, attempt, program, entry, undefined))
  )

/**
 * `f` of the options resolved, once the key is checked against the fiber's backend (a
 * `LockOptionsError` otherwise, before anything is sent). Synchronous for options seen before.
 */
const validated = <A, E, R>(
  fiber: Fiber.RuntimeFiber<unknown, unknown>,
  key: string,
  options: LockOptions | undefined,
  f: (resolved: ResolvedOptions) => Effect.Effect<A, E, R>
): Effect.Effect<A, E | LockOptionsError, R> => {
  const error = keyErrorFor(Context.unsafeGet(fiber.currentContext, LockBackend), key)
  if (error !== undefined) return Effect.fail(error)
  const resolved = resolvedBefore(options)
  return resolved === undefined ? Effect.flatMap(resolveOptions(options), f) : f(resolved)
}

const runLockedIn = <A, E, R, E2, Busy extends undefined, EK = never>(
  fiber: Fiber.RuntimeFiber<unknown, unknown>,
  key: string,
  options: ResolvedOptions,
  attempt: Attempt<E2, Busy>,
  program: Program<A, E, R>,
  entry: KindEntry<EK> | undefined,
  owner: string | undefined
): Effect.Effect<A | Busy, E | E2 | EK | LockBackendError | LockLostError, R> => {
  const region = fiber.getFiberRef(currentRegion)
  const enter = entering(fiber, key, entry)
  if (enter instanceof LockBackendError) return Effect.fail(enter)
  const backend = enter.backend
  const reentered = findHold(region, backend, key)
  if (reentered !== undefined) return reenter(reentered, program, fiber)
  const checkedOwner = checked(enter.check, region, enter.base, key)
  if (!isOwner(checkedOwner)) return Effect.fail(checkedOwner)
  return Effect.uninterruptibleMask((restore) =>
    Effect.flatMap(
      acquireFresh(backend, key, options, attempt, restore, undefined, fiber, checkedOwner.owner ?? owner),
      (hold): Effect.Effect<A | Busy, E | E2 | LockLostError, R> => {
        if (hold === undefined) return Effect.succeed(hold as Busy)
        return Effect.matchCauseEffect(runGuarded(hold, runProgram(program, hold), restore, extend(region, hold)), {
          onFailure: (cause) => Effect.zipRight(releaseHold(hold), Effect.failCause(cause)),
          onSuccess: (value) => Effect.as(releaseHold(hold), value)
        })
      }
    )
  )
}

/** Enter `key` for the rest of the current scope: the core of `acquire` and `tryAcquire`. */
export const enterScoped = <E, Busy extends undefined, EK = never>(
  key: string,
  options: ResolvedOptions,
  attempt: Attempt<E, Busy>,
  entry?: KindEntry<EK> | undefined,
  owner?: string | undefined
): Effect.Effect<Lease | Busy, E | EK | LockBackendError, LockBackend | Scope.Scope> =>
  Effect.withFiberRuntime((fiber) => enterScopedIn(fiber, key, options, attempt, entry, owner))

/** `enterScoped` with the key checked and the options resolved first, as `withLockOf` does. */
export const enterScopedOf = <E, Busy extends undefined, EK = never>(
  key: string,
  options: LockOptions | undefined,
  attempt: Attempt<E, Busy>,
  entry?: KindEntry<EK> | undefined
): Effect.Effect<Lease | Busy, E | EK | LockBackendError | LockOptionsError, LockBackend | Scope.Scope> =>
  Effect.withFiberRuntime((fiber) =>
    validated(fiber, key, options, (resolved) => enterScopedIn(fiber, key, resolved, attempt, entry, undefined))
  )

/**
 * The scope's finaliser for `hold`, made outside `enterScopedIn` so that the closure, which lives as
 * long as the scope, keeps only the hold alive (a closure made in there kept that call's whole
 * context: a few hundred bytes per hold).
 */
const releaseOnClose = (hold: Hold) => () =>
  Effect.zipRight(FiberRef.update(currentRegion, (current) => without(current, hold)), releaseHold(hold))

const enterScopedIn = <E, Busy extends undefined, EK = never>(
  fiber: Fiber.RuntimeFiber<unknown, unknown>,
  key: string,
  options: ResolvedOptions,
  attempt: Attempt<E, Busy>,
  entry: KindEntry<EK> | undefined,
  owner: string | undefined
): Effect.Effect<Lease | Busy, E | EK | LockBackendError> => {
  const scope = Context.unsafeGet(fiber.currentContext, Scope.Scope)
  const region = fiber.getFiberRef(currentRegion)
  const enter = entering(fiber, key, entry)
  if (enter instanceof LockBackendError) return Effect.fail(enter)
  const backend = enter.backend
  return Effect.uninterruptibleMask((restore): Effect.Effect<Lease | Busy, E | EK> => {
    const reentered = findHold(region, backend, key)
    if (reentered !== undefined) {
      reentered.count++
      metrics.count(metrics.reentries, backend.labels)
      return Effect.as(Scope.addFinalizer(scope, Effect.sync(() => reentered.count--)), makeLease(reentered))
    }
    const checkedOwner = checked(enter.check, region, enter.base, key)
    if (!isOwner(checkedOwner)) return Effect.fail(checkedOwner)
    return Effect.flatMap(
      acquireFresh(backend, key, options, attempt, restore, scope, fiber, checkedOwner.owner ?? owner),
      (hold): Effect.Effect<Lease | Busy> =>
        hold === undefined ? Effect.succeed(hold as Busy) : Effect.zipRight(
          // The rest of the scope is the hold's region: joiners of this fiber see it too. When the
          // scope closes, the hold leaves the region of the fiber that closes it, then is released.
          // One closure per hold, and the finaliser's effect made only when the scope closes.
          Scope.addFinalizerExit(scope, releaseOnClose(hold)),
          Effect.as(FiberRef.update(currentRegion, (current) => extend(current, hold)), makeLease(hold))
        )
    )
  })
}
