/**
 * e. Reentrancy: inside a held lock, the same program takes the same key again. effect-lock enters
 * at once (the owner in the fiber already holds it) without a round trip: measured as the cost of
 * a nested `withLock` minus the same loop without it, with the server's command counters read
 * around the loop (their delta must be zero).
 *
 * The peers have no notion of an owner that outlives one acquire call, so a nested acquire waits
 * for the outer one, which waits for the nested one: a self-deadlock. The bench checks that with a
 * bounded nested attempt (it gives up after 300 ms) instead of assuming it.
 */
import { Effect } from "effect"
import type { LockLibrary } from "../peers.js"
import { diffStats } from "../support/redis.js"
import { now } from "../support/stats.js"
import type { BenchContext } from "./common.js"
import { withClient } from "./common.js"

export interface ReentrantResult {
  readonly library: string
  readonly reentrant: boolean
  /** Nested withLock on a held key, in nanoseconds (library-native loops only). */
  readonly nanosPerNested?: number | undefined
  /** The same loop with a bare `Effect.void` instead of the nested lock. */
  readonly nanosPerBaseline?: number | undefined
  /** Redis commands executed while the nested loop ran (admin `INFO` excluded). */
  readonly redisCommandsDuringLoop?: number | undefined
  readonly iterations?: number | undefined
  /** For non-reentrant libraries: what a nested acquire did within 300 ms. */
  readonly nestedOutcome: string
}

const ITERATIONS = 100_000
const NESTED_PATIENCE_MS = 300

export const reentrant = (ctx: BenchContext, library: LockLibrary) =>
  withClient(ctx, library, (client) =>
    Effect.gen(function*() {
      const key = "bench:reentrant"
      const nested = client.withLock(key, Effect.void).pipe(
        Effect.timeout(NESTED_PATIENCE_MS),
        Effect.as("entered at once"),
        Effect.catchTag("TimeoutException", () =>
          Effect.succeed(`still waiting after ${NESTED_PATIENCE_MS} ms (self-deadlock), gave up`)),
        Effect.catchAll((error) =>
          Effect.succeed(`failed: ${String(error)}`)
        )
      )
      if (!library.reentrant) {
        const nestedOutcome = yield* client.withLock(key, nested)
        return { library: library.name, reentrant: false, nestedOutcome } satisfies ReentrantResult
      }
      const iterations = Math.max(10_000, Math.round(ITERATIONS * Math.min(1, ctx.scale)))
      return yield* client.withLock(
        key,
        Effect.gen(function*() {
          const nestedOutcome = yield* nested
          const inner = Effect.orDie(client.withLock(key, Effect.void))
          // Warm both loops up, then time them.
          for (let i = 0; i < iterations / 10; i++) yield* inner
          for (let i = 0; i < iterations / 10; i++) yield* Effect.void
          const before = yield* Effect.promise(() => ctx.admin.commandStats())
          let start = now()
          for (let i = 0; i < iterations; i++) yield* inner
          const nestedNanos = ((now() - start) * 1e6) / iterations
          const after = yield* Effect.promise(() => ctx.admin.commandStats())
          start = now()
          for (let i = 0; i < iterations; i++) yield* Effect.void
          const baseline = ((now() - start) * 1e6) / iterations
          const delta = diffStats(before, after)
          // The first INFO is counted in the second snapshot.
          delta.set("info", (delta.get("info") ?? 0) - 1)
          let commands = 0
          for (const calls of delta.values()) commands += calls
          return {
            library: library.name,
            reentrant: true,
            nanosPerNested: nestedNanos,
            nanosPerBaseline: baseline,
            redisCommandsDuringLoop: commands,
            iterations,
            nestedOutcome
          } satisfies ReentrantResult
        })
      )
    }))
