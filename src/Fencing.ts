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
import { createHash } from "node:crypto"
import { readFileSync } from "node:fs"
import type { Redis } from "ioredis"
import { LockBackendError } from "./LockError.js"

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

let fencedSet: { readonly source: string; readonly sha: string } | undefined
const fencedSetScript = () => {
  if (fencedSet === undefined) {
    const source = readFileSync(new URL("../lua/fenced-set.lua", import.meta.url), "utf8")
    fencedSet = { source, sha: createHash("sha1").update(source).digest("hex") }
  }
  return fencedSet
}

/**
 * SET `key` to `value` in Redis only if `token` is not older than the newest token that wrote it,
 * atomically (one Lua script: `lua/fenced-set.lua`).
 *
 * @since 0.1.0
 * @category redis
 */
export const redisSet = (
  client: Redis,
  options: RedisSetOptions
): Effect.Effect<void, FencingTokenRejectedError | LockBackendError> =>
  Effect.suspend(() => {
    const script = fencedSetScript()
    const fenceKey = options.fenceKey ?? `fence:{${options.key}}`
    const args = [options.key, fenceKey, options.token.toString(), options.value] as const
    return Effect.tryPromise({
      try: () =>
        client.evalsha(script.sha, 2, ...args).catch((error: unknown) =>
          error instanceof Error && error.message.startsWith("NOSCRIPT")
            ? client.eval(script.source, 2, ...args)
            : Promise.reject(error)
        ),
      catch: (cause) => new LockBackendError({ backend: "redis", operation: "fenced set", key: options.key, cause })
    })
  }).pipe(
    Effect.flatMap((reply) => {
      const [written, highest] = reply as [number, string]
      return written === 1
        ? Effect.void
        : Effect.fail(
          new FencingTokenRejectedError({ resource: options.key, token: options.token, highest: BigInt(highest) })
        )
    })
  )
