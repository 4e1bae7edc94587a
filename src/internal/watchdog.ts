/**
 * The watchdog: a fiber in the hold's scope that renews the lease every `renew` period with an
 * owner-checked call, and declares the lock lost when a renewal finds another owner or no lock,
 * or when the local deadline passes without a confirmed renewal. With `renew: false` it only
 * waits for the deadline.
 */
import { Effect, Metric } from "effect"
import type { LockRequest } from "../LockBackend.js"
import type { Hold } from "./hold.js"
import { markLost } from "./hold.js"
import * as metrics from "./metrics.js"
import { nowMillis, wholeMillis } from "./time.js"

const sleepUntil = (at: number) => Effect.flatMap(nowMillis, (now) => Effect.sleep(wholeMillis(at - now)))

const untilDeadline = (hold: Hold): Effect.Effect<void> =>
  Effect.zipRight(sleepUntil(hold.deadline), markLost(hold, "expired"))

const renewing = (hold: Hold): Effect.Effect<void> => {
  const { backend, options } = hold
  const request: LockRequest = {
    key: hold.key,
    owner: hold.owner.id,
    leaseMillis: options.leaseMillis,
    fencing: options.fencing
  }
  // After a failed renewal, retry soon: a third of the period, between 10 ms and 1 s.
  const retryMillis = Math.min(1000, Math.max(10, Math.floor(options.renewMillis / 3)))
  let confirmedAt = hold.acquiredAt
  let lastError: unknown = undefined

  const renewOnce = Effect.gen(function*() {
    const startedAt = yield* nowMillis
    const left = hold.deadline - startedAt
    // Past the deadline with no failed call: the process did not get to renew in time (paused,
    // starved); with failed calls: the backend could not confirm a renewal.
    if (left <= 0) return yield* markLost(hold, lastError === undefined ? "expired" : "renewal-failed", lastError)
    const result = yield* backend.renew(request).pipe(
      Effect.timeoutOption(wholeMillis(left)),
      Effect.either
    )
    if (hold.state !== "held") return
    if (result._tag === "Left") {
      lastError = result.left
      yield* Effect.logDebug("Lease renewal failed; retrying until the local deadline", result.left).pipe(
        Effect.annotateLogs({ key: hold.key, owner: hold.owner.id })
      )
      const now = yield* nowMillis
      return yield* Effect.sleep(wholeMillis(Math.min(retryMillis, hold.deadline - now)))
    }
    if (result.right._tag === "None") {
      // The call outlived the deadline: the lease can no longer be trusted.
      return yield* markLost(hold, "renewal-failed", lastError)
    }
    const outcome = result.right.value
    // Another owner, or no lock at all although this call started before our deadline (so the
    // server-side lease cannot have run out): somebody took or deleted it (force-unlock, flush,
    // failover). For the program both mean the lock was taken from it.
    if (outcome._tag === "Lost") return yield* markLost(hold, "stolen")
    lastError = undefined
    confirmedAt = startedAt
    hold.deadline = startedAt + options.leaseMillis - options.driftMillis
    yield* Metric.increment(metrics.renewals)
    yield* nextRenewal
  })
  // Renew on the period, but never sleep past the deadline (a renew period close to the lease).
  const nextRenewal = Effect.suspend(() => sleepUntil(Math.min(confirmedAt + options.renewMillis, hold.deadline)))

  return Effect.zipRight(
    nextRenewal,
    Effect.whileLoop({ while: () => hold.state === "held", body: () => renewOnce, step: () => {} })
  )
}

/**
 * Start the watchdog. It runs as a daemon (it must not die with the fiber that acquired, which may
 * be a short-lived child) and is interrupted by `releaseOne`; it is interruptible even when started
 * from a mask.
 */
export const startWatchdog = (hold: Hold): Effect.Effect<void> =>
  Effect.suspend(() => {
    metrics.watchdogs.active++
    return Effect.forkDaemon(
      Effect.interruptible(
        (hold.options.renewMillis > 0 ? renewing(hold) : untilDeadline(hold)).pipe(
          Effect.ensuring(Effect.sync(() => metrics.watchdogs.active--))
        )
      )
    )
  }).pipe(Effect.map((fiber) => {
    hold.watchdog = fiber
  }))
