/**
 * The metrics effect-lock records, as values: read them with `Metric.value`, or export them with
 * `@effect/opentelemetry` (or any `Metric` exporter) along with your own. All are named
 * `effect_lock_*` and tagged with `backend` (the backend's name: "memory", "redis"); `lost` is also
 * tagged with the `reason`. None is tagged with the lock's key: keys are unbounded, and a metric
 * tag per key would be a memory leak in any metrics backend. docs/observability.md lists them with
 * the spans.
 *
 * ```ts
 * import { Console, Effect, Metric } from "effect"
 * import { LockMetrics, MemoryBackend, withLock } from "effect-lock"
 *
 * const program = Effect.gen(function*() {
 *   yield* withLock("reports", Effect.void)
 *   const acquired = yield* Metric.value(Metric.tagged(LockMetrics.acquisitions, "backend", "memory"))
 *   yield* Console.log(`acquisitions: ${acquired.count}`)
 * })
 * ```
 *
 * @since 0.2.0
 */
import { Metric } from "effect"
import * as timers from "./internal/timers.js"

/**
 * Fresh acquisitions (a reentry into a held lock is not one; a hand-over is).
 *
 * @since 0.2.0
 * @category counters
 */
export const acquisitions = Metric.counter("effect_lock_acquisitions_total", {
  description: "Fresh acquisitions (reentrant entries excluded; hand-overs included)"
})

/**
 * Reentrant entries into a lock the region already held (no backend call).
 *
 * @since 0.2.0
 * @category counters
 */
export const reentries = Metric.counter("effect_lock_reentries_total", {
  description: "Reentrant entries into a lock the region already held"
})

/**
 * Multi-locks whose keys were all taken in one all-or-nothing step (`MultiLock` on memory, one
 * Redis server or one cluster slot); each key is counted in `acquisitions` too.
 *
 * @since 0.3.0
 * @category counters
 */
export const multiLockTogether = Metric.counter("effect_lock_multi_lock_together_total", {
  description: "Multi-locks whose keys were all taken in one all-or-nothing step"
})

/**
 * Acquisitions handed over by a release in this process (also counted in `acquisitions`).
 *
 * @since 0.2.0
 * @category counters
 */
export const handOvers = Metric.counter("effect_lock_hand_overs_total", {
  description: "Acquisitions handed over by a release in this process (counted in acquisitions too)"
})

/**
 * Acquisitions that gave up waiting (`LockTimeoutError`).
 *
 * @since 0.2.0
 * @category counters
 */
export const timeouts = Metric.counter("effect_lock_timeouts_total", {
  description: "Acquisitions that gave up waiting"
})

/**
 * Locks lost while held, tagged with the `reason` (`stolen`, `deleted`, `expired`,
 * `renewal-failed`).
 *
 * @since 0.2.0
 * @category counters
 */
export const lost = Metric.counter("effect_lock_lost_total", { description: "Locks lost while held, by reason" })

/**
 * Releases that failed (the lease then ends on its own).
 *
 * @since 0.2.0
 * @category counters
 */
export const releaseFailures = Metric.counter("effect_lock_release_failures_total", {
  description: "Releases that failed (the lease then expires on its own)"
})

/**
 * Writes (`operation`: acquire, renew, release, force-release) that fewer replicas confirmed than
 * the Redis backend's `replicas.sync` asks for, tagged with the `operation`. Only a Redis backend
 * with replica sync counts them; an acquisition that no replica confirmed (which fails and is
 * released) is counted too.
 *
 * @since 0.3.0
 * @category counters
 */
export const replicaSyncShortfalls = Metric.counter("effect_lock_replica_sync_short_total", {
  description: "Lock writes confirmed by fewer replicas than replicas.sync asks for"
})

/**
 * Confirmed lease renewals.
 *
 * @since 0.2.0
 * @category counters
 */
export const renewals = Metric.counter("effect_lock_renewals_total", { description: "Confirmed lease renewals" })

/**
 * How long acquisitions waited: from the first busy attempt to getting the lock or giving up. An
 * acquisition that found the lock free does not wait and is not recorded.
 *
 * @since 0.2.0
 * @category histograms
 */
export const waitTime = timers.waitTime.metric

/**
 * How long locks were held: from the acquisition to the release (or the loss).
 *
 * @since 0.2.0
 * @category histograms
 */
export const holdTime = timers.holdTime.metric

/**
 * How long renewal calls took (one call renews every lease due at the same instant).
 *
 * @since 0.2.0
 * @category histograms
 */
export const renewLatency = timers.renewLatency.metric

/**
 * Locks held by this process right now (each under a watchdog).
 *
 * @since 0.2.0
 * @category gauges
 */
export const held = Metric.gauge("effect_lock_held", { description: "Locks held by this process" })

/**
 * Fibers of this process waiting for a lock right now.
 *
 * @since 0.2.0
 * @category gauges
 */
export const waiters = Metric.gauge("effect_lock_waiters", { description: "Fibers waiting for a lock" })
