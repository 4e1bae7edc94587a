/**
 * The watchdog: a fiber forked into the hold's scope and interrupted when the scope closes. It
 * renews the lease every `renew` period with an owner-checked call, and declares the hold lost when
 * a renewal finds another owner or no lock, or when the local deadline passes without a confirmed
 * renewal. With `renew: false` it only watches the deadline.
 *
 * It keeps time on `Clock` (so `TestClock` drives it) through the backend's renewal scheduler.
 * Renewals come due on a grid (a power of two no larger than an eighth of the period, in Clock
 * milliseconds), never later than the period, so holds taken at about the same time renew at the
 * same instant and the scheduler sends them in one backend call. Renewing up to an eighth of a
 * period early costs nothing.
 *
 * The fast version of this shape: while its renewals go well, a hold is only a member of the
 * scheduler's bucket for its next renewal (one object per hold, `Due`, moved to the next bucket when
 * a renewal is confirmed, removed when the hold ends). The watchdog fiber is forked into the hold's
 * scope by the bucket, with the outcome, the first time a renewal is not confirmed (it failed, the
 * lock was lost, the deadline passed; with `renew: false`, at the deadline), and from then on it
 * runs the loop below until the hold ends. Most locks are held for less than a renew period, and a
 * healthy hold never needs more: neither pays for a fiber, a scope or a timer of its own, and
 * renewing ten thousand holds wakes no fiber per hold (each wake-up allocated a continuation that
 * lived for a whole period, and the collector's work on those showed as event-loop delay).
 */
import type { HashMap, Tracer } from "effect"
import { Effect, FiberRef, Scope } from "effect"
import type { LockRequest } from "../../LockBackend.js"
import type { Backend } from "../backend/make.js"
import type { Member, Renewal } from "../backend/renewals.js"
import * as metrics from "../metrics.js"
import { nowMillis } from "../time.js"
import type { Hold } from "./hold.js"
import { makeHold, markLost } from "./hold.js"
import type { ResolvedOptions } from "./options.js"

/** After a failed renewal, retry soon: a third of the period, between 10 ms and 1 s. */
const retryMillis = (renewMillis: number) => Math.min(1000, Math.max(10, Math.floor(renewMillis / 3)))

const gridOf = (renewMillis: number) => 2 ** Math.max(0, Math.floor(Math.log2(Math.max(1, renewMillis / 8))))

/** The renewal after one that started at `from`: on the grid, at most a period later. */
const nextDue = (from: number, renewMillis: number) => {
  const grid = gridOf(renewMillis)
  return Math.max(from + 1, Math.floor((from + renewMillis) / grid) * grid)
}

/**
 * The watchdog fiber's life, from the outcome of its first renewal (or, with `renew: false`, of its
 * deadline) on. Returns when the hold is lost; its scope interrupts it otherwise.
 */
const watchdog = (hold: Hold, first: Renewal): Effect.Effect<void> =>
  Effect.gen(function*() {
    const { options } = hold
    const { request } = hold
    const spanOf = () => hold.span
    let renewal = first
    let lastError: unknown = undefined
    while (hold.state._tag === "Held") {
      let due: number
      switch (renewal._tag) {
        case "Overdue": {
          // Past the deadline with no call made: renewal is off, or the process did not get to renew
          // in time (paused, starved); with failed or unanswered calls: the backend could not
          // confirm a renewal.
          if (!renewal.attempted && lastError === undefined) return yield* markLost(hold, "expired")
          return yield* markLost(
            hold,
            "renewal-failed",
            lastError ?? new Error("the renewal got no reply before the local deadline")
          )
        }
        case "Lost": {
          // Another owner; or no lock at all although the call started before our deadline, so the
          // server-side lease cannot have run out: somebody deleted it (force-unlock, flush, failover).
          return yield* markLost(hold, renewal.reason === "stolen" ? "stolen" : "deleted")
        }
        case "Failed": {
          lastError = renewal.error
          yield* Effect.logDebug("Lease renewal failed; retrying until the local deadline", renewal.error).pipe(
            Effect.annotateLogs({ key: hold.key, owner: hold.owner })
          )
          due = Math.min((yield* nowMillis) + retryMillis(options.renewMillis), hold.deadline)
          break
        }
        case "Renewed": {
          lastError = undefined
          hold.deadline = renewal.startedAt + options.leaseMillis - options.driftMillis
          metrics.count(metrics.renewals, hold.backend.labels)
          due = nextDue(renewal.startedAt, options.renewMillis)
        }
      }
      renewal = yield* hold.backend.renewals.renewAt(request, due, hold.deadline, spanOf)
    }
  })

/** Fork the watchdog into the hold's scope (a scope of its own for `withLock`, made now). */
const start = (hold: Hold, first: Renewal): Effect.Effect<void> =>
  Effect.suspend(() => {
    if (hold.state._tag !== "Held") return Effect.void
    // Started by the renewal scheduler, it logs with the annotations of the fiber that acquired.
    const fork = (scope: Scope.Scope) =>
      hold.state._tag === "Held"
        ? Effect.asVoid(Effect.forkIn(
          Effect.interruptible(Effect.locally(watchdog(hold, first), FiberRef.currentLogAnnotations, hold.annotations)),
          scope
        ))
        : Effect.void
    if (hold.scope !== undefined) return fork(hold.scope)
    return Effect.flatMap(Scope.make(), (scope) => {
      hold.ownScope = scope
      return fork(scope)
    })
  })

/**
 * The hold of an acquisition that just succeeded, watched from now on and counted: `view` is the
 * backend the hold talks to (a semaphore's view of its backend), `backend` the one that serves it.
 */
export const holdAcquired = (
  view: Backend,
  backend: Backend,
  request: LockRequest,
  options: ResolvedOptions,
  acquired: { readonly fencingToken: bigint; readonly startedAt: number },
  scope: Scope.Scope | undefined,
  annotations: HashMap.HashMap<string, unknown>
): Hold => {
  const hold = makeHold(view, request, options, acquired.fencingToken, acquired.startedAt, scope, annotations)
  watch(hold)
  backend.holds.add(hold)
  metrics.count(metrics.acquisitions, backend.labels)
  return hold
}

/**
 * Watch `hold` from now until it ends (released or lost: see `hold.ts`): its first renewal (or its
 * deadline, with `renew: false`) is scheduled, and every confirmed renewal schedules the next; the
 * watchdog fiber starts when one is not confirmed. The release tells the scheduler the hold is gone
 * once its round trip is over, so that a loop that takes one lock after another never finds the
 * backend idle in between (the scheduler would stop its timers).
 */
export const watch = (hold: Hold): void => {
  const { renewals } = hold.backend
  const renewing = hold.options.renewMillis > 0
  const due = new Due(hold)
  renewals.track()
  metrics.count(metrics.held, hold.backend.labels)
  hold.watched = true
  due.scheduleAt(renewing ? nextDue(hold.acquiredAt, hold.options.renewMillis) : hold.deadline)
}

/**
 * A hold in the scheduler while its renewals go well (`hold.firstDue`, in the bucket of
 * `hold.firstDueAt`): one small object per hold, no closures, reused for every renewal.
 */
class Due implements Member {
  constructor(readonly hold: Hold) {}
  /** Renewing, or (`renew: false`) only waiting for the deadline. */
  get renewing(): boolean {
    return this.hold.options.renewMillis > 0
  }
  /** The scheduler may send it with an earlier bucket, from this instant on, to fill a batch. */
  get earliest(): number {
    const { hold } = this
    // Bringing a renewal forward by up to a grid step costs nothing (see `nextDue`).
    return this.renewing ? hold.firstDueAt - gridOf(hold.options.renewMillis) : hold.firstDueAt
  }
  get request(): LockRequest | undefined {
    return this.renewing ? this.hold.request : undefined
  }
  get deadline(): number {
    return this.hold.deadline
  }
  scheduleAt(at: number): void {
    const { hold } = this
    hold.firstDue = this
    hold.firstDueAt = at
    hold.backend.renewals.schedule(this, at)
  }
  deliver(renewal: Renewal): Effect.Effect<void> {
    const { hold } = this
    // Still this hold's entry (not released, lost, or handed to its watchdog fiber) and renewed.
    if (renewal._tag === "Renewed" && hold.firstDue === this && hold.state._tag === "Held") {
      hold.deadline = renewal.startedAt + hold.options.leaseMillis - hold.options.driftMillis
      metrics.count(metrics.renewals, hold.backend.labels)
      this.scheduleAt(nextDue(renewal.startedAt, hold.options.renewMillis))
      return Effect.void
    }
    if (hold.firstDue === this) hold.firstDue = undefined
    return start(hold, renewal)
  }
  span(): Tracer.AnySpan | undefined {
    return this.hold.span
  }
}
