/**
 * Updating the metrics of `LockMetrics` from the lock code: synchronously (`unsafeModify`,
 * `unsafeUpdate`) with the backend's labels, rather than through an effect per update, on the hot
 * path of every lock.
 */
import { Duration } from "effect"
import type { MetricLabel } from "effect"

export * from "../LockMetrics.js"

type Labels = ReadonlyArray<MetricLabel.MetricLabel>

/** Add to a counter or a gauge for `labels`. */
export const count = (
  metric: { readonly unsafeModify: (input: number, extraTags: Labels) => void },
  labels: Labels,
  by = 1
): void => metric.unsafeModify(by, labels)

/** Record a duration in milliseconds in a timer histogram for `labels`. */
export const time = (
  metric: { readonly unsafeUpdate: (input: Duration.Duration, extraTags: Labels) => void },
  labels: Labels,
  millis: number
): void => metric.unsafeUpdate(Duration.millis(Math.max(0, millis)), labels)
