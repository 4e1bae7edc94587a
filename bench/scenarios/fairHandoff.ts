/**
 * k. Fair-lock hand-off: the hand-off scenario (c: 16 workers, one key, ~1 ms inside, ~1 ms
 * outside) with `FairLock.withLock` on effect-lock's Redis backend, next to the same run with the
 * mutex (`withLock`). The fair lock serves waiters in the order they came, across processes, and
 * pays for it with a queue in Redis and a channel per waiting owner.
 */
import { Context, Effect, Layer } from "effect"
import type * as EffectLock from "../../src/index.js"
import type * as EffectLockRedisBackend from "../../src/RedisBackend.js"
import type { LockLibrary } from "../peers.js"
import { effectLock, LockFailure } from "../peers.js"
import type { BenchContext } from "./common.js"
import type { HandoffResult } from "./handoff.js"
import { handoff } from "./handoff.js"

// effect-lock from its build, as in peers.ts.
const effectLockBuild = "../../dist/index.js"
const effectLockRedisBuild = "../../dist/RedisBackend.js"
const { FairLock, LockBackend } = (await import(effectLockBuild)) as typeof EffectLock
const { RedisBackend } = (await import(effectLockRedisBuild)) as typeof EffectLockRedisBackend

export type FairHandoffLock = "FairLock" | "Lock (mutex)"

export interface FairHandoffResult extends HandoffResult {
  readonly lock: FairHandoffLock
}

/** effect-lock's `FairLock.withLock`, as a library the hand-off scenario can drive. */
const fairLock: LockLibrary = {
  ...effectLock,
  usage: "`FairLock.withLock(key, body)` on `RedisBackend.layer({ url })`, defaults",
  open: (url) =>
    Effect.map(
      Layer.build(RedisBackend.layer({ url })).pipe(
        Effect.mapError((cause) => new LockFailure({ library: "effect-lock", cause }))
      ),
      (context) => {
        const backend = Context.get(context, LockBackend)
        return {
          withLock: <A>(key: string, body: Effect.Effect<A>) =>
            FairLock.withLock(key, body).pipe(
              Effect.provideService(LockBackend, backend),
              Effect.mapError((cause) => new LockFailure({ library: "effect-lock", cause }))
            ),
          context: Context.empty() as Context.Context<never>
        }
      }
    )
}

export const fairHandoff = (ctx: BenchContext, lock: FairHandoffLock) =>
  Effect.map(
    handoff(ctx, lock === "FairLock" ? fairLock : effectLock),
    (result): FairHandoffResult => ({ ...result, lock })
  )
