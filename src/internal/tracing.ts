/**
 * Spans on lock operations, recorded when the application installs a tracer (for example
 * `@effect/opentelemetry`). With Effect's built-in tracer, which exports nothing, the span is
 * skipped: creating one costs several microseconds, a measurable share of an uncontended lock.
 */
import { Effect } from "effect"
import type { Fiber } from "effect"

const builtInTracer = Effect.runSync(Effect.tracer)

/** Whether `fiber` records spans (a tracer other than Effect's built-in one is installed). */
export const isTracing = (fiber: Fiber.RuntimeFiber<unknown, unknown>): boolean => fiber.currentTracer !== builtInTracer

export const withSpan =
  (name: string, attributes: Record<string, unknown>) =>
  <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
    Effect.withFiberRuntime((fiber) =>
      isTracing(fiber) ? Effect.withSpan(effect, name, { attributes, captureStackTrace: false }) : effect
    )
