/**
 * Local time for deadlines and leases: `Clock.currentTimeNanos`, which Effect's live clock derives
 * from the monotonic `process.hrtime` (a wall-clock jump cannot move a deadline) and which
 * `TestClock` drives. Milliseconds, with microsecond precision.
 */
import { Clock, Effect } from "effect"

export const nowMillis: Effect.Effect<number> = Effect.map(
  Clock.currentTimeNanos,
  (nanos) => Number(nanos / 1000n) / 1000
)

/**
 * Whole milliseconds to sleep, rounded up: a sleep never ends before its target, and `TestClock`
 * (whose nanosecond reading requires whole milliseconds) only ever advances to whole milliseconds.
 */
export const wholeMillis = (millis: number): number => Math.max(0, Math.ceil(millis))
