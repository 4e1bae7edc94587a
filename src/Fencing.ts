/**
 * Fencing: the resource side of a fencing token. A lease lock cannot stop a holder that was paused
 * past its lease from writing; the resource can, by remembering the highest token it accepted and
 * refusing older ones. This module gives that check for an in-process resource (`makeMemory`) and
 * for a Redis key (`redisSet`, one atomic script). docs/fencing.md shows the same rule for SQL.
 *
 * ```ts
 * import { Effect } from "effect"
 * import { Fencing, withLock } from "effect-lock"
 *
 * const program = Effect.gen(function*() {
 *   const fence = yield* Fencing.makeMemory
 *   yield* withLock("ledger", (lease) => fence.admit("ledger", lease.fencingToken))
 * })
 * ```
 *
 * @since 0.1.0
 */
import { Effect, Option, Schema } from "effect"
import { redisError, unexpectedReply } from "./internal/redis/errors.js"
import * as internalScripts from "./internal/redis/scripts.js"
import type { LockBackendError } from "./LockError.js"

/**
 * A write carried a fencing token older than one the resource has already accepted: a newer
 * holder has taken the lock since, so this writer must stop.
 *
 * @since 0.1.0
 * @category errors
 */
export class FencingTokenRejectedError
  extends Schema.TaggedError<FencingTokenRejectedError>()("FencingTokenRejectedError", {
    resource: Schema.String,
    token: Schema.BigIntFromSelf,
    highest: Schema.BigIntFromSelf
  })
{
  override get message(): string {
    return `Write to "${this.resource}" with fencing token ${this.token} refused: token ${this.highest} has already written`
  }
}

/**
 * Remembers the highest token per resource and admits only writes that are not older.
 * A token equal to the highest is admitted: the current holder may write many times.
 *
 * @since 0.1.0
 * @category models
 */
export interface Fence {
  readonly admit: (resource: string, token: bigint) => Effect.Effect<void, FencingTokenRejectedError>
  readonly highest: (resource: string) => Effect.Effect<Option.Option<bigint>>
}

/**
 * An in-process fence. Check and record happen in one synchronous step, so the check cannot be
 * raced by another fiber; do the write itself right after `admit` in the same critical section
 * of the resource.
 *
 * @since 0.1.0
 * @category constructors
 */
export const makeMemory: Effect.Effect<Fence> = Effect.sync(() => {
  const seen = new Map<string, bigint>()
  return {
    admit: (resource, token) =>
      Effect.suspend(() => {
        const highest = seen.get(resource)
        if (highest !== undefined && token < highest) {
          return Effect.fail(new FencingTokenRejectedError({ resource, token, highest }))
        }
        seen.set(resource, token)
        return Effect.void
      }),
    highest: (resource) => Effect.sync(() => Option.fromNullable(seen.get(resource)))
  }
})

/**
 * What `redisSet` needs of a Redis client: ioredis' `evalsha` and `eval`. An ioredis `Redis` or
 * `Cluster` is one; the type is structural so that this module needs no ioredis types.
 *
 * @since 0.2.0
 * @category models
 */
export type ScriptClient = internalScripts.ScriptClient

/**
 * @since 0.1.0
 * @category models
 */
export interface RedisSetOptions {
  /** The data key to write. */
  readonly key: string
  readonly value: string
  /** The writer's `lease.fencingToken`. */
  readonly token: bigint
  /**
   * Where the highest accepted token is kept. Default `fence:{<key>}`. In Redis Cluster the data
   * key and the fence key must hash to one slot: put the same `{tag}` in both.
   */
  readonly fenceKey?: string | undefined
}

const fencedSet = internalScripts.defineScript({
  name: "fenced-set",
  encode: (key: string, fenceKey: string, token: bigint, value: string) =>
    [[key, fenceKey], [token.toString(), value]] as const,
  decode: (reply): { readonly written: boolean; readonly highest: bigint } | undefined => {
    if (!Array.isArray(reply)) return undefined
    const [written, highest] = reply as [unknown, unknown]
    if ((written !== 0 && written !== 1) || typeof highest !== "string" || !/^\d+$/.test(highest)) return undefined
    return { written: written === 1, highest: BigInt(highest) }
  }
})

/**
 * SET `key` to `value` in Redis only if `token` is not older than the newest token that wrote it,
 * atomically (one Lua script: `lua/fenced-set.lua`).
 *
 * @since 0.1.0
 * @category redis
 */
export const redisSet = (
  client: ScriptClient,
  options: RedisSetOptions
): Effect.Effect<void, FencingTokenRejectedError | LockBackendError> =>
  Effect.async<{ readonly written: boolean; readonly highest: bigint }, LockBackendError>((resume) => {
    internalScripts.runScript(
      client,
      fencedSet,
      [options.key, options.fenceKey ?? `fence:{${options.key}}`, options.token, options.value],
      (reply) => {
        const decoded = fencedSet.decode(reply)
        resume(
          decoded === undefined
            ? Effect.fail(unexpectedReply("fenced-set", options.key, reply))
            : Effect.succeed(decoded)
        )
      },
      (cause) => resume(Effect.fail(redisError("fenced-set", options.key, cause)))
    )
  }).pipe(
    Effect.flatMap(({ highest, written }) =>
      written
        ? Effect.void
        : Effect.fail(new FencingTokenRejectedError({ resource: options.key, token: options.token, highest }))
    )
  )
