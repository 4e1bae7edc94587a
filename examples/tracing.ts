/**
 * Locks traced with OpenTelemetry, spans printed to the console: `npx tsx examples/tracing.ts`.
 * See docs/observability.md for every span, attribute and metric.
 */
import { NodeSdk } from "@effect/opentelemetry"
import { ConsoleSpanExporter, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base"
import { Effect } from "effect"
import { withLock } from "../src/Lock.js"
import * as MemoryBackend from "../src/MemoryBackend.js"

const Tracing = NodeSdk.layer(() => ({
  resource: { serviceName: "billing" },
  spanProcessor: new SimpleSpanProcessor(new ConsoleSpanExporter())
}))

const charge = Effect.zipRight(Effect.log("charging"), Effect.sleep("10 millis")).pipe(Effect.withSpan("charge"))

// two workers on one key: the second is handed the lock by the first's release, and its hold span
// links to the first's
const program = Effect.all([withLock("orders:42", charge), withLock("orders:42", charge)], { concurrency: 2 })

Effect.runPromise(program.pipe(Effect.provide(MemoryBackend.layer), Effect.provide(Tracing)))
