/** What every scenario gets, and how it opens a library on a clean server. */
import { Effect } from "effect"
import type { LockClient, LockFailure, LockLibrary } from "../peers.js"
import type { Admin } from "../support/redis.js"

export interface BenchContext {
  readonly url: string
  readonly host: string
  readonly port: number
  readonly admin: Admin
  /** Multiplies every measuring window (`BENCH_SCALE`, default 1). */
  readonly scale: number
  readonly log: (line: string) => void
}

/** `ms` scaled by `BENCH_SCALE`, never below 100 ms. */
export const window = (ctx: BenchContext, ms: number): number => Math.max(100, Math.round(ms * ctx.scale))

/**
 * Run `f` with a freshly opened client of `library` on an empty server (`FLUSHALL`), inside the
 * client's context (its services, provided once); the client and everything it opened is closed
 * afterwards.
 */
export const withClient = <A, E>(
  ctx: BenchContext,
  library: LockLibrary,
  f: (client: LockClient) => Effect.Effect<A, E>
): Effect.Effect<A, E | LockFailure> =>
  Effect.scoped(
    Effect.gen(function*() {
      yield* Effect.promise(() => ctx.admin.flushAll())
      const client = yield* library.open(ctx.url)
      return yield* Effect.provide(f(client), client.context)
    })
  )

/** An error a scenario could not recover from, with the library it came from. */
export const describeFailure = (error: unknown): string => {
  if (typeof error === "object" && error !== null && "cause" in error) {
    const cause = (error as { cause: unknown }).cause
    if (cause instanceof Error) return cause.message
    if (typeof cause === "object" && cause !== null && "_tag" in cause) return String((cause as { _tag: unknown })._tag)
    return String(cause)
  }
  return String(error)
}
