/**
 * Metrics, all named `effect_lock_*` and tagged with the backend's name (`backend`): never with
 * the key, whose cardinality is unbounded. The lock code updates them synchronously
 * (`unsafeUpdate`) with the backend's labels, rather than through an effect per update.
 */
import type { MetricLabel } from "effect"
import { Metric } from "effect"

/** Add one to a counter (or a gauge) for `labels`. */
export const count = (
  metric: { readonly unsafeModify: (input: number, extraTags: ReadonlyArray<MetricLabel.MetricLabel>) => void },
  labels: ReadonlyArray<MetricLabel.MetricLabel>,
  by = 1
): void => metric.unsafeModify(by, labels)

export const acquisitions = Metric.counter("effect_lock_acquisitions_total", {
  description: "Fresh acquisitions (reentrant entries excluded)"
})
export const reentries = Metric.counter("effect_lock_reentries_total", {
  description: "Reentrant entries into a lock the owner already held"
})
export const handOvers = Metric.counter("effect_lock_hand_overs_total", {
  description: "Acquisitions handed over by a release in this process (counted in acquisitions too)"
})
export const timeouts = Metric.counter("effect_lock_timeouts_total", {
  description: "Acquisitions that gave up waiting"
})
export const lost = Metric.counter("effect_lock_lost_total", { description: "Locks lost while held" })
export const releaseFailures = Metric.counter("effect_lock_release_failures_total", {
  description: "Releases that failed (the lease then expires on its own)"
})
export const renewals = Metric.counter("effect_lock_renewals_total", { description: "Confirmed lease renewals" })
export const waitTime = Metric.timerWithBoundaries("effect_lock_wait_duration", [
  1,
  5,
  10,
  50,
  100,
  500,
  1000,
  5000,
  30000
])

export const watchdogs = Metric.gauge("effect_lock_watchdogs_active", {
  description: "Holds under a watchdog: one per held lock, 0 when no lock is held"
})
