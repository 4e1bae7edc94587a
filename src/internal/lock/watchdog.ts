/**
 * The watchdog: a fiber forked into the hold's scope, interrupted when the scope closes. It renews
 * the lease every `renew` period with an owner-checked call, and declares the hold lost when a
 * renewal finds another owner or no lock, or when the local deadline passes without a confirmed
 * renewal. With `renew: false` it only watches the deadline.
 *
 * It waits on `Clock` (so `TestClock` drives it) through the backend's renewal scheduler: renewals
 * come due on a grid (a power of two no larger than an eighth of the period, in Clock
 * milliseconds), never later than the period, so holds taken at about the same time renew at the
 * same instant, and the scheduler sends all renewals due at one instant in one backend call.
 * Renewing up to an eighth of a period early costs nothing.
 */
import { Effect, Metric } from "effect"
import type { LockRequest } from "../../LockBackend.js"
import * as metrics from "../metrics.js"
import { nowMillis, sleepMillis } from "../time.js"
import type { Hold } from "./hold.js"
import { markLost } from "./hold.js"

/** After a failed renewal, retry soon: a third of the period, between 10 ms and 1 s. */
const retryMillis = (renewMillis: number) => Math.min(1000, Math.max(10, Math.floor(renewMillis / 3)))

const gridOf = (renewMillis: number) => 2 ** Math.max(0, Math.floor(Math.log2(Math.max(1, renewMillis / 8))))

/** The renewal after one that started at `from`: on the grid, at most a period later. */
const nextDue = (from: number, renewMillis: number) => {
  const grid = gridOf(renewMillis)
  return Math.max(from + 1, Math.floor((from + renewMillis) / grid) * grid)
}

const sleepUntil = (due: number) => Effect.flatMap(nowMillis, (now) => sleepMillis(due - now))

/** Renew until the hold ends; returns when it is lost (the caller's scope interrupts it otherwise). */
const renewing = (hold: Hold): Effect.Effect<void> =>
  Effect.gen(function*() {
    const { options } = hold
    const request: LockRequest = {
      key: hold.key,
      owner: hold.owner,
      leaseMillis: options.leaseMillis,
      fencing: options.fencing
    }
    let lastError: unknown = undefined
    let due = nextDue(hold.acquiredAt, options.renewMillis)
    while (hold.state._tag === "Held") {
      const renewal = yield* hold.backend.renewAt(request, due, hold.deadline)
      if (hold.state._tag !== "Held") return
      switch (renewal._tag) {
        case "Overdue": {
          // Past the deadline with no call made: the process did not get to renew in time (paused,
          // starved); with failed or unanswered calls: the backend could not confirm a renewal.
          if (!renewal.attempted && lastError === undefined) return yield* markLost(hold, "expired")
          return yield* markLost(
            hold,
            "renewal-failed",
            lastError ?? new Error("the renewal got no reply before the local deadline")
          )
        }
        case "Failed": {
          lastError = renewal.error
          yield* Effect.logDebug("Lease renewal failed; retrying until the local deadline", renewal.error).pipe(
            Effect.annotateLogs({ key: hold.key, owner: hold.owner })
          )
          due = Math.min((yield* nowMillis) + retryMillis(options.renewMillis), hold.deadline)
          break
        }
        case "Lost": {
          // Another owner, or no lock at all although the call started before our deadline (so the
          // server-side lease cannot have run out): somebody took or deleted it (force-unlock,
          // flush, failover). For the program both mean the lock was taken from it.
          return yield* markLost(hold, "stolen")
        }
        case "Renewed": {
          lastError = undefined
          hold.deadline = renewal.startedAt + options.leaseMillis - options.driftMillis
          yield* Metric.increment(metrics.renewals)
          due = nextDue(renewal.startedAt, options.renewMillis)
        }
      }
    }
  })

/** With renewal off the lease simply ends at the local deadline. */
const expiring = (hold: Hold): Effect.Effect<void> =>
  Effect.zipRight(sleepUntil(hold.deadline), Effect.suspend(() => markLost(hold, "expired")))

/** The watchdog's whole life; fork it into the hold's scope. */
export const watchdog = (hold: Hold): Effect.Effect<void> =>
  Effect.ensuring(
    Effect.zipRight(
      Metric.increment(metrics.watchdogs),
      hold.options.renewMillis > 0 ? renewing(hold) : expiring(hold)
    ),
    Metric.incrementBy(metrics.watchdogs, -1)
  )
