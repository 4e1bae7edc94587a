/**
 * The renewal scheduler, one per backend, living in the backend layer's scope. Renewals wait in
 * buckets by the Clock instant they are due, and each bucket has one timer fiber that sends all of
 * its renewals together, 100 to a `primitives.renew` call (as Redisson 4.7's `LockTask` renews up to
 * 100 locks in one script). Registering before the instant, rather than gathering whoever wakes at
 * it, makes the batching exact on any clock, `TestClock` included; the watchdogs' renewal grid puts
 * holds taken at about the same time into the same bucket.
 *
 * A member of a bucket is delivered its renewal's outcome in the bucket's fiber. A watchdog fiber
 * awaits it (`renewAt`); a hold whose watchdog has not started yet is handed it by `schedule`'s
 * `deliver`, which starts the watchdog with it (see `lock/watchdog.ts`).
 *
 * Timers never outlive the holds: when the backend's last hold ends, the bucket timers are stopped
 * on the next turn of the event loop unless a hold has started again by then, so a process whose
 * locks are all released has nothing left that keeps Node running.
 */
import type { Fiber, MetricLabel, Scope, Tracer } from "effect"
import { Cause, Deferred, Effect, Exit, FiberId, FiberSet, Option } from "effect"
import type { LockPrimitives, LockRequest, RenewOutcome } from "../../LockBackend.js"
import { LockBackendError } from "../../LockError.js"
import * as metrics from "../metrics.js"
import { nowMillis, sleepMillis, wholeMillis } from "../time.js"
import * as timers from "../timers.js"
import { isTracing } from "../tracing.js"

/**
 * How one scheduled renewal went: renewed (the call started at `startedAt`), lost, failed (retry
 * while there is time), or overdue: the hold's local deadline passed before a renewal could be
 * confirmed (`attempted`: a call was in flight, and got no reply in time).
 */
export type Renewal =
  | { readonly _tag: "Renewed"; readonly startedAt: number }
  | { readonly _tag: "Lost"; readonly reason: "stolen" | "expired" }
  | { readonly _tag: "Failed"; readonly error: LockBackendError }
  | { readonly _tag: "Overdue"; readonly attempted: boolean }

export interface Member {
  /** What to renew; `undefined` for a hold that only waits for its deadline (`renew: false`). */
  readonly request: LockRequest | undefined
  readonly deadline: number
  /** Called in the bucket's fiber with the outcome. */
  deliver(renewal: Renewal): Effect.Effect<void>
  /** The span of the hold renewed, if traced: the renewal's span links to it. */
  span(): Tracer.AnySpan | undefined
}

export interface Renewals {
  /** Put `member` in the bucket of instant `at`. */
  readonly schedule: (member: Member, at: number) => void
  /** Take `member` out of the bucket of instant `at` again, if it was not sent yet. */
  readonly unschedule: (member: Member, at: number) => void
  /** Renew `request` at `at` with everything due then, and wait for the outcome. Interrupting withdraws it. */
  readonly renewAt: (
    request: LockRequest,
    at: number,
    deadline: number,
    span?: () => Tracer.AnySpan | undefined
  ) => Effect.Effect<Renewal>
  /** Count a hold as watched, until `untrack` (called once per `track`). */
  readonly track: () => void
  readonly untrack: () => void
}

/** The most renewals sent in one `primitives.renew` call. */
export const MAX_RENEW_BATCH = 100

interface Bucket {
  readonly members: Set<Member>
  fiber: Fiber.RuntimeFiber<void> | undefined
}

const notSent: Renewal = { _tag: "Overdue", attempted: false }
const unanswered: Renewal = { _tag: "Overdue", attempted: true }

export const makeRenewals = (
  primitives: LockPrimitives,
  labels: ReadonlyArray<MetricLabel.MetricLabel>
): Effect.Effect<Renewals, never, Scope.Scope> =>
  Effect.gen(function*() {
    // The bucket timers run in the backend's scope (and are interrupted when it closes).
    const runFork = yield* FiberSet.makeRuntime<never, void, never>()
    const buckets = new Map<number, Bucket>()
    let watched = 0
    let idleCheck = false

    const failure = (request: LockRequest, cause: unknown) =>
      new LockBackendError({ backend: primitives.name, operation: "renew", key: request.key, cause })
    const outcomeOf = (request: LockRequest, outcome: RenewOutcome | undefined, startedAt: number): Renewal =>
      outcome === undefined
        ? { _tag: "Failed", error: failure(request, new Error("the backend returned no outcome for this renewal")) }
        : outcome._tag === "LockBackendError"
        ? { _tag: "Failed", error: outcome }
        : outcome._tag === "Renewed"
        ? { _tag: "Renewed", startedAt }
        : outcome

    /** Send one batch and deliver each member its outcome. */
    const send = (batch: ReadonlyArray<Member & { readonly request: LockRequest }>) =>
      Effect.gen(function*() {
        const startedAt = yield* nowMillis
        const live = batch.filter((member) => member.deadline > startedAt)
        yield* Effect.forEach(batch, (member) => member.deadline > startedAt ? Effect.void : member.deliver(notSent), {
          discard: true
        })
        if (live.length === 0) return
        // No reply is of use after the earliest deadline in the batch: that hold is lost by then.
        const budget = wholeMillis(Math.min(...live.map((member) => member.deadline)) - startedAt)
        const renewing = Effect.timeoutOption(primitives.renew(live.map((m) => m.request)), budget)
        const exit = yield* Effect.exit(traced(renewing, live))
        const now = yield* nowMillis
        metrics.time(timers.renewLatency, labels, now - startedAt)
        yield* Effect.forEach(live, (member, i): Effect.Effect<void> => {
          if (Exit.isFailure(exit)) {
            const error = Cause.failureOption(exit.cause)
            return member.deliver({
              _tag: "Failed",
              error: Option.isSome(error) ? error.value : failure(member.request, Cause.squash(exit.cause))
            })
          }
          if (Option.isNone(exit.value)) {
            return member.deliver(
              member.deadline <= now
                ? unanswered
                : {
                  _tag: "Failed",
                  error: failure(member.request, new Error("no reply before the earliest deadline of its batch"))
                }
            )
          }
          return member.deliver(outcomeOf(member.request, exit.value.value[i], startedAt))
        }, { discard: true })
      })

    /** With a tracer installed, a renewal call is an `effect-lock.renew` span linked to its holds' spans. */
    const traced = <A, E>(renewing: Effect.Effect<A, E>, batch: ReadonlyArray<Member>) =>
      Effect.withFiberRuntime<A, E>((fiber) => {
        if (!isTracing(fiber)) return renewing
        const links: Array<Tracer.SpanLink> = []
        for (const member of batch) {
          const span = member.span()
          if (span !== undefined) links.push({ _tag: "SpanLink", span, attributes: {} })
        }
        return Effect.withSpan(renewing, "effect-lock.renew", {
          attributes: { "effect_lock.backend": primitives.name, "effect_lock.renewals": batch.length },
          links,
          root: true,
          captureStackTrace: false
        })
      })

    const fire = (at: number, bucket: Bucket): Effect.Effect<void> =>
      Effect.zipRight(
        Effect.flatMap(nowMillis, (now) => sleepMillis(at - now)),
        Effect.suspend(() => {
          if (buckets.get(at) === bucket) buckets.delete(at)
          const renewing: Array<Member & { readonly request: LockRequest }> = []
          const waiting: Array<Member> = []
          for (const member of bucket.members) {
            if (member.request === undefined) waiting.push(member)
            else renewing.push(member as Member & { readonly request: LockRequest })
          }
          const sends: Array<Effect.Effect<void>> = waiting.map((member) => member.deliver(notSent))
          for (let i = 0; i < renewing.length; i += MAX_RENEW_BATCH) {
            sends.push(send(renewing.slice(i, i + MAX_RENEW_BATCH)))
          }
          return Effect.all(sends, { concurrency: "unbounded", discard: true })
        })
      )

    // The last hold ended: unless one starts again within this turn of the event loop (a loop that
    // takes one lock after another), stop every timer, so that nothing keeps the process alive.
    const stopIdleTimers = () => {
      idleCheck = false
      if (watched > 0) return
      for (const bucket of buckets.values()) bucket.fiber?.unsafeInterruptAsFork(FiberId.none)
      buckets.clear()
    }

    const schedule = (member: Member, at: number): void => {
      let bucket = buckets.get(at)
      if (bucket === undefined) {
        const opened: Bucket = { members: new Set(), fiber: undefined }
        buckets.set(at, opened)
        opened.fiber = runFork(fire(at, opened))
        bucket = opened
      }
      bucket.members.add(member)
    }

    const unschedule = (member: Member, at: number): void => {
      buckets.get(at)?.members.delete(member)
    }

    const renewAt = (
      request: LockRequest,
      at: number,
      deadline: number,
      span?: () => Tracer.AnySpan | undefined
    ): Effect.Effect<Renewal> =>
      Effect.uninterruptibleMask((restore) =>
        Effect.suspend(() => {
          const done = Deferred.unsafeMake<Renewal>(FiberId.none)
          const member: Member = {
            request,
            deadline,
            deliver: (renewal) => Effect.sync(() => Deferred.unsafeDone(done, Exit.succeed(renewal))),
            span: () => span?.()
          }
          schedule(member, at)
          return Effect.onInterrupt(restore(Deferred.await(done)), () => Effect.sync(() => unschedule(member, at)))
        })
      )

    const track = () => {
      watched++
    }
    const untrack = () => {
      watched--
      if (watched === 0 && !idleCheck) {
        idleCheck = true
        setImmediate(stopIdleTimers)
      }
    }

    return { schedule, unschedule, renewAt, track, untrack }
  })
