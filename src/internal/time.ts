/**
 * Local time for deadlines and leases: `Clock.currentTimeNanos`, which Effect's live clock derives
 * from the monotonic `process.hrtime` (a wall-clock jump cannot move a deadline) and which
 * `TestClock` drives. Milliseconds, with microsecond precision.
 */
import type { Fiber } from "effect"
import { Clock, Context, Effect } from "effect"

/** `nowMillis` read off `clock` synchronously. */
export const unsafeNowMillis = (clock: Clock.Clock): number => Number(clock.unsafeCurrentTimeNanos() / 1000n) / 1000

/** The Clock of `fiber` (the live one, or `TestClock` where a test installed it). */
export const clockOf = (fiber: Fiber.RuntimeFiber<unknown, unknown>): Clock.Clock =>
  Context.get(fiber.currentDefaultServices, Clock.Clock)

/** `nowMillis` read off `fiber`'s Clock synchronously, from inside `Effect.withFiberRuntime`. */
export const fiberNowMillis = (fiber: Fiber.RuntimeFiber<unknown, unknown>): number => unsafeNowMillis(clockOf(fiber))

/** `Effect.flatMap(nowMillis, f)` in one step of the run loop: for the hot paths. */
export const withNow = <A, E, R>(f: (now: number) => Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  Effect.withFiberRuntime((fiber) => f(fiberNowMillis(fiber)))

// Read on the hot path of every acquire and release: one step of the fiber's run loop, not four.
export const nowMillis: Effect.Effect<number> = Effect.withFiberRuntime((fiber) =>
  Effect.succeed(fiberNowMillis(fiber))
)

/**
 * Whole milliseconds to sleep, rounded up: a sleep never ends before its target, and `TestClock`
 * (whose nanosecond reading requires whole milliseconds) only ever advances to whole milliseconds.
 */
export const wholeMillis = (millis: number): number => Math.max(0, Math.ceil(millis))

/** The longest timer JavaScript runs; Effect's live clock treats a longer sleep as endless. */
export const MAX_TIMER_MILLIS = 2 ** 31 - 1

/**
 * Sleep `millis` (rounded up to whole milliseconds) on `Clock`, in steps no timer refuses, so that a
 * sleep of more than 24.8 days still ends. `Infinity` never ends.
 */
export const sleepMillis = (millis: number): Effect.Effect<void> => {
  if (millis === Infinity) return Effect.never
  const whole = wholeMillis(millis)
  return whole <= MAX_TIMER_MILLIS
    ? Effect.sleep(whole)
    : Effect.zipRight(Effect.sleep(MAX_TIMER_MILLIS), Effect.suspend(() => sleepMillis(whole - MAX_TIMER_MILLIS)))
}
