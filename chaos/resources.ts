/**
 * The protected resources, as a worker sees them: a counter in a PostgreSQL row and a counter in a
 * Redis key, each read, incremented and written under the lock with the grant's fencing token.
 *
 * A fenced read-modify-write needs the token at the read too: with a check at the write only, an
 * old holder (token 5) and a new one (token 6) can both read 10 and write 11 when the old holder's
 * write lands before the new holder's first write. So each resource is **claimed** first: the
 * claim raises the resource's highest token to ours (refused if a newer one is there) and reads the
 * value; the write is accepted only while no newer token has claimed since. Two writes that read
 * the same value can then never both be accepted.
 *
 * - PostgreSQL: `UPDATE ... SET token = $t WHERE token <= $t RETURNING value, writer`, then
 *   `UPDATE ... SET value, writer WHERE token <= $t`, both on one row.
 * - Redis: `Fencing.redisSet` of a claim key and a GET, then `Fencing.redisSet` of the data key,
 *   both fenced by one fence key: `lua/fenced-set.lua` is the check.
 *
 * The value records its writer (an operation id), so the checker can walk the resource's chain of
 * writes. The broken variant `fencing` drops every check (plain SELECT/UPDATE, GET/SET).
 */
import { Data, Effect } from "effect"
import type { Redis } from "ioredis"
import type pg from "pg"
import * as Fencing from "../src/Fencing.js"
import type { ResourceName } from "./history.js"

/** The resource refused the token: a newer one has claimed it. */
export class Refused extends Data.TaggedError("Refused")<{ readonly res: ResourceName; readonly highest: string }> {}

/** The resource failed (connection lost, timeout, server error): the step's effect is unknown. */
export class ResourceFailed extends Data.TaggedError("ResourceFailed")<{
  readonly res: ResourceName
  readonly message: string
}> {}

export interface Value {
  readonly n: number
  readonly writer: string
}

export interface Resource {
  readonly name: ResourceName
  readonly claim: (token: bigint, op: string) => Effect.Effect<Value, Refused | ResourceFailed>
  readonly write: (token: bigint, value: Value) => Effect.Effect<void, Refused | ResourceFailed>
}

const failed = (res: ResourceName) => (cause: unknown) =>
  new ResourceFailed({ res, message: cause instanceof Error ? cause.message : String(cause) })

export const postgres = (client: pg.Client, table: string, row: string, fenced: boolean): Resource => {
  const query = <R extends pg.QueryResultRow>(text: string, values: ReadonlyArray<unknown>) =>
    Effect.tryPromise({ try: () => client.query<R>(text, [...values]), catch: failed("pg") })
  const highest = Effect.map(
    query<{ token: string }>(`SELECT token::text AS token FROM ${table} WHERE run = $1`, [row]),
    (result) => result.rows[0]?.token ?? "?"
  )
  return {
    name: "pg",
    claim: (token) =>
      Effect.flatMap(
        fenced
          ? query<{ value: number; writer: string }>(
            `UPDATE ${table} SET token = $2 WHERE run = $1 AND token <= $2 RETURNING value, writer`,
            [row, token.toString()]
          )
          : query<{ value: number; writer: string }>(`SELECT value, writer FROM ${table} WHERE run = $1`, [row]),
        (result) => {
          const found = result.rows[0]
          return found === undefined
            ? Effect.flatMap(highest, (h) => Effect.fail(new Refused({ res: "pg", highest: h })))
            : Effect.succeed({ n: found.value, writer: found.writer })
        }
      ),
    write: (token, value) =>
      Effect.flatMap(
        fenced
          ? query(`UPDATE ${table} SET value = $3, writer = $4 WHERE run = $1 AND token <= $2`, [
            row,
            token.toString(),
            value.n,
            value.writer
          ])
          : query(`UPDATE ${table} SET value = $2, writer = $3 WHERE run = $1`, [row, value.n, value.writer]),
        (result) =>
          result.rowCount === 1
            ? Effect.void
            : Effect.flatMap(highest, (h) => Effect.fail(new Refused({ res: "pg", highest: h })))
      )
  }
}

export const parseValue = (raw: string | null): Value => {
  if (raw === null) return { n: 0, writer: "" }
  const parsed = JSON.parse(raw) as Value
  return { n: parsed.n, writer: parsed.writer }
}

export const redis = (
  client: Redis,
  keys: { readonly data: string; readonly fence: string; readonly claim: string },
  fenced: boolean
): Resource => {
  const call = <A>(f: () => Promise<A>) => Effect.tryPromise({ try: f, catch: failed("redis") })
  const fencedSet = (key: string, value: string, token: bigint) =>
    Fencing.redisSet(client, { key, value, token, fenceKey: keys.fence }).pipe(
      Effect.catchTags({
        FencingTokenRejectedError: (error) =>
          Effect.fail(new Refused({ res: "redis", highest: String(error.highest) })),
        LockBackendError: (error) => Effect.fail(failed("redis")(error.cause ?? error))
      })
    )
  return {
    name: "redis",
    claim: (token, op) =>
      Effect.zipRight(
        fenced ? fencedSet(keys.claim, op, token) : Effect.void,
        Effect.map(call(() => client.get(keys.data)), parseValue)
      ),
    write: (token, value) => {
      const raw = JSON.stringify(value)
      return fenced ? fencedSet(keys.data, raw, token) : Effect.asVoid(call(() => client.set(keys.data, raw)))
    }
  }
}
