/**
 * Updating the metrics of `LockMetrics` from the lock code: synchronously (`unsafeModify`,
 * `unsafeUpdate`) with the backend's labels, rather than through an effect per update, on the hot
 * path of every lock.
 */
import type { MetricLabel } from "effect"
import * as timers from "./timers.js"

export * from "../LockMetrics.js"

type Labels = ReadonlyArray<MetricLabel.MetricLabel>

/** Add to a counter or a gauge for `labels`. */
export const count = (
  metric: { readonly unsafeModify: (input: number, extraTags: Labels) => void },
  labels: Labels,
  by = 1
): void => metric.unsafeModify(by, labels)

/** Record a duration in milliseconds in one of `LockMetrics`' timers (`timers.holdTime`, ...) for `labels`. */
export const time = (timer: timers.Timer, labels: Labels, millis: number): void => timers.record(timer, labels, millis)
