/**
 * The renewal scheduler, one per backend, living in the backend layer's scope. Renewals wait in
 * buckets by the Clock instant they are due, and each bucket has one timer fiber that sends all of
 * its renewals together, 100 to a `primitives.renew` call (as Redisson 4.7's `LockTask` renews up to
 * 100 locks in one script). Registering before the instant, rather than gathering whoever wakes at
 * it, makes the batching exact on any clock, `TestClock` included; the watchdogs' renewal grid puts
 * holds taken at about the same time into the same bucket. A bucket whose last batch has room fills
 * it with renewals of later buckets that may go that early (`Member.earliest`: a grid step), so
 * holds taken over a longer stretch cost one call per 100 each period, not one more per bucket.
 *
 * A member of a bucket is delivered its renewal's outcome in the bucket's fiber. A watchdog fiber
 * awaits it (`renewAt`); a hold whose watchdog has not started yet is handed it by `schedule`'s
 * `deliver`, which starts the watchdog with it (see `lock/watchdog.ts`).
 *
 * Timers never keep Node running without a hold. On Effect's own clock a bucket's timer is a Node
 * timer (the same `setTimeout` that clock's sleep uses), made a fiber only when it fires with members
 * in it; while the backend watches no hold, those timers are unref'd, so a process whose locks are
 * all released can exit, and a loop that takes one lock after another keeps its bucket instead of
 * starting a fiber and a timer per lock (which cost a serial loop a third of its CPU). On any other
 * clock (`TestClock`) a bucket is a fiber sleeping on that clock, stopped on the next turn of the
 * event loop once the last hold ends unless a hold has started again by then.
 */
import type { Fiber, MetricLabel, Scope, Tracer } from "effect"
import { Cause, Clock, Deferred, Effect, Exit, FiberId, FiberSet, Option } from "effect"
import type { LockPrimitives, LockRequest, RenewOutcome } from "../../LockBackend.js"
import { LockBackendError } from "../../LockError.js"
import * as metrics from "../metrics.js"
import { MAX_TIMER_MILLIS, nowMillis, sleepMillis, unsafeNowMillis, wholeMillis } from "../time.js"
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
  /**
   * From which instant renewing it is as good as at its own (renewing early only moves its next
   * renewal earlier): the scheduler then may send it with an earlier bucket whose last batch has
   * room. `undefined`: only at its own instant.
   */
  readonly earliest?: number | undefined
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
  /** On another clock, or for an instant beyond what a Node timer can wait: the fiber that sleeps. */
  fiber: Fiber.RuntimeFiber<void> | undefined
  /** On Effect's own clock: the Node timer, until it fires. */
  timer: ReturnType<typeof setTimeout> | undefined
}

/** Effect's own clock, as `Clock.make()` builds it (not a `TestClock`, not a user's clock). */
const liveClockPrototype: unknown = Object.getPrototypeOf(Clock.make())
const isLiveClock = (clock: Clock.Clock): boolean => Object.getPrototypeOf(clock) === liveClockPrototype

const notSent: Renewal = { _tag: "Overdue", attempted: false }
const unanswered: Renewal = { _tag: "Overdue", attempted: true }

export const makeRenewals = (
  primitives: LockPrimitives,
  labels: ReadonlyArray<MetricLabel.MetricLabel>
): Effect.Effect<Renewals, never, Scope.Scope> =>
  Effect.gen(function*() {
    // The bucket timers run in the backend's scope (and are interrupted when it closes).
    const runFork = yield* FiberSet.makeRuntime<never, void, never>()
    const clock = yield* Effect.clock
    const live = isLiveClock(clock)
    const buckets = new Map<number, Bucket>()
    let watched = 0
    let idleCheck = false
    yield* Effect.addFinalizer(() =>
      Effect.sync(() => {
        for (const bucket of buckets.values()) if (bucket.timer !== undefined) clearTimeout(bucket.timer)
        buckets.clear()
      })
    )

    const failure = (request: LockRequest, cause: unknown) =>
      new LockBackendError({ backend: primitives.name, operation: "renew", key: request.key, cause })
    const outcomeOf = (request: LockRequest, outcome: RenewOutcome | undefined, renewed: Renewal): Renewal =>
      outcome === undefined
        ? { _tag: "Failed", error: failure(request, new Error("the backend returned no outcome for this renewal")) }
        : outcome._tag === "LockBackendError"
        ? { _tag: "Failed", error: outcome }
        : outcome._tag === "Renewed"
        ? renewed
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
        const renewed: Renewal = { _tag: "Renewed", startedAt }
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
          return member.deliver(outcomeOf(member.request, exit.value.value[i], renewed))
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

    /** Send the renewals of a bucket that came due, and deliver the rest their deadline. */
    const due = (at: number, bucket: Bucket): Effect.Effect<void> =>
      Effect.suspend(() => {
        if (buckets.get(at) === bucket) buckets.delete(at)
        const renewing: Array<Member & { readonly request: LockRequest }> = []
        const waiting: Array<Member> = []
        for (const member of bucket.members) {
          if (member.request === undefined) waiting.push(member)
          else renewing.push(member as Member & { readonly request: LockRequest })
        }
        fill(at, renewing)
        const sends: Array<Effect.Effect<void>> = waiting.map((member) => member.deliver(notSent))
        for (let i = 0; i < renewing.length; i += MAX_RENEW_BATCH) {
          sends.push(send(renewing.slice(i, i + MAX_RENEW_BATCH)))
        }
        return Effect.all(sends, { concurrency: "unbounded", discard: true })
      })

    /**
     * Fill the last batch of the bucket of `at` with renewals of later buckets that may go this early
     * (`Member.earliest`), nearest first: holds taken over a stretch of time land in several buckets,
     * and each bucket's partial last batch would cost a call of its own every period. A member brought
     * forward renews with this bucket from then on, so the buckets merge.
     */
    const fill = (at: number, renewing: Array<Member & { readonly request: LockRequest }>) => {
      let room = (MAX_RENEW_BATCH - (renewing.length % MAX_RENEW_BATCH)) % MAX_RENEW_BATCH
      if (room === 0 || renewing.length === 0) return
      const later: Array<number> = []
      for (const instant of buckets.keys()) if (instant > at) later.push(instant)
      later.sort((a, b) => a - b)
      for (const instant of later) {
        const members = buckets.get(instant)?.members
        if (members === undefined) continue
        let looked = 0
        for (const member of members) {
          // A bucket's members mostly share their grid: after a few that cannot go, none will.
          if (looked++ >= MAX_RENEW_BATCH) break
          if (member.request === undefined || member.earliest === undefined || member.earliest > at) continue
          members.delete(member)
          renewing.push(member as Member & { readonly request: LockRequest })
          if (--room === 0) return
        }
      }
    }

    const fire = (at: number, bucket: Bucket): Effect.Effect<void> =>
      Effect.zipRight(Effect.flatMap(nowMillis, (now) => sleepMillis(at - now)), due(at, bucket))

    /** A Node timer fired for the bucket of `at`: an empty bucket just goes. */
    const fired = (at: number, bucket: Bucket) => {
      bucket.timer = undefined
      if (bucket.members.size === 0) {
        if (buckets.get(at) === bucket) buckets.delete(at)
        return
      }
      bucket.fiber = runFork(due(at, bucket))
    }

    // The last hold ended: unless one starts again within this turn of the event loop (a loop that
    // takes one lock after another), stop every timer, so that nothing keeps the process alive.
    // (A Node timer of Effect's clock was unref'd when the last hold ended, and stays.)
    const stopIdleTimers = () => {
      idleCheck = false
      if (watched > 0) return
      for (const [at, bucket] of buckets) {
        if (bucket.timer !== undefined) continue
        bucket.fiber?.unsafeInterruptAsFork(FiberId.none)
        buckets.delete(at)
      }
    }

    const hasFiberBucket = (): boolean => {
      for (const bucket of buckets.values()) if (bucket.fiber !== undefined && bucket.timer === undefined) return true
      return false
    }

    const open = (at: number): Bucket => {
      const bucket: Bucket = { members: new Set(), fiber: undefined, timer: undefined }
      buckets.set(at, bucket)
      const delay = wholeMillis(at - unsafeNowMillis(clock))
      if (live && delay <= MAX_TIMER_MILLIS) {
        bucket.timer = setTimeout(() => fired(at, bucket), delay)
        if (watched === 0) bucket.timer.unref()
      } else {
        bucket.fiber = runFork(fire(at, bucket))
      }
      return bucket
    }

    const schedule = (member: Member, at: number): void => {
      const bucket = buckets.get(at) ?? open(at)
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
      if (watched === 1 && live) { for (const bucket of buckets.values()) bucket.timer?.ref() }
    }
    const untrack = () => {
      watched--
      if (watched === 0 && live) { for (const bucket of buckets.values()) bucket.timer?.unref() }
      // Only a bucket that is a fiber keeps Node running (Node timers are unref'd above).
      if (watched === 0 && !idleCheck && hasFiberBucket()) {
        idleCheck = true
        setImmediate(stopIdleTimers)
      }
    }

    return { schedule, unschedule, renewAt, track, untrack }
  })
