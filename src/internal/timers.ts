/**
 * The histograms behind `LockMetrics`' timers. A timer made by `Metric.timerWithBoundaries` tags
 * every update with `time_unit` by building a new tag array, so each update looks up (and hashes)
 * a new metric key: measurable on the hot path. The lock code updates these histograms directly,
 * in milliseconds, with one tag array per backend (made once), which lands in the same metric.
 */
import { Duration, Metric, MetricBoundaries, MetricLabel } from "effect"
import type { MetricKeyType, MetricState } from "effect"

type Labels = ReadonlyArray<MetricLabel.MetricLabel>

export interface Timer {
  /** The public timer: a histogram of `Duration`s in milliseconds, tagged `time_unit`. */
  readonly metric: Metric.Metric<
    MetricKeyType.MetricKeyType.Histogram,
    Duration.Duration,
    MetricState.MetricState.Histogram
  >
  /** The histogram it updates, for `record`. */
  readonly histogram: Metric.Metric.Histogram<number>
}

const unit = MetricLabel.make("time_unit", "milliseconds")

/** What `Metric.timerWithBoundaries(name, boundaries, description)` makes, with its histogram at hand. */
export const make = (name: string, boundaries: ReadonlyArray<number>, description: string): Timer => {
  const histogram = Metric.histogram(name, MetricBoundaries.fromIterable(boundaries), description)
  return {
    histogram,
    metric: histogram.pipe(Metric.taggedWithLabels([unit]), Metric.mapInput(Duration.toMillis))
  }
}

/** `labels` with the unit first, as the public timer tags it: one array per `labels` array. */
const withUnit = new WeakMap<Labels, Labels>()

/** Record `millis` in `timer` for `labels` (a backend's labels: a stable array). */
export const record = (timer: Timer, labels: Labels, millis: number): void => {
  let tags = withUnit.get(labels)
  if (tags === undefined) {
    tags = [unit, ...labels]
    withUnit.set(labels, tags)
  }
  timer.histogram.unsafeUpdate(Math.max(0, millis), tags)
}

const millisBoundaries = [1, 5, 10, 50, 100, 500, 1000, 5000, 30000, 300000]

export const waitTime: Timer = make(
  "effect_lock_wait_duration",
  millisBoundaries,
  "How long acquisitions waited for a busy lock"
)

export const holdTime: Timer = make("effect_lock_hold_duration", millisBoundaries, "How long locks were held")

export const renewLatency: Timer = make(
  "effect_lock_renew_duration",
  [0.5, 1, 2, 5, 10, 50, 100, 500, 1000, 5000],
  "How long renewal calls took"
)
