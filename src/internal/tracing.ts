/**
 * Spans on lock operations, recorded when the application installs a tracer (for example
 * `@effect/opentelemetry`). With Effect's built-in tracer, which exports nothing, the span is
 * skipped: creating one costs several microseconds, a measurable share of an uncontended lock.
 */
import { Effect } from "effect"

const builtInTracer = Effect.runSync(Effect.tracer)

export const withSpan =
  (name: string, attributes: Record<string, unknown>) =>
  <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
    Effect.flatMap(Effect.tracer, (tracer) =>
      tracer === builtInTracer
        ? effect
        : Effect.withSpan(effect, name, { attributes, captureStackTrace: false }))
