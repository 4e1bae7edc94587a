/**
 * The campaign's resources (chaos/resources.ts) on a real PostgreSQL and a real redis-server, driven
 * through the interleaving that fencing exists for: an old holder (token 5) claims and reads, is
 * "paused", a new holder (token 6) claims, reads and writes, and then the old holder writes. With
 * fencing the old write is refused and the checker passes the history; with the fencing check off
 * (the broken variant) the old write is accepted and the checker must flag it. Deterministic: the
 * steps are run in this order by the test, not by timing.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit } from "effect"
import { Redis } from "ioredis"
import pg from "pg"
import { check } from "../../chaos/checker.js"
import { namesOf } from "../../chaos/config.js"
import type { HistoryRecord, ViolationKind } from "../../chaos/history.js"
import type { Resource } from "../../chaos/resources.js"
import { parseValue, postgres, redis } from "../../chaos/resources.js"
import { skipRedis, startRedisServer } from "../support/redisServer.js"

const skip = skipRedis(true)
const pgUrl = process.env.CHAOS_PG_URL ?? "postgresql://postgres@127.0.0.1:5432/test"

const connectPostgres = async (): Promise<pg.Client | undefined> => {
  const client = new pg.Client({ connectionString: pgUrl, connectionTimeoutMillis: 3000 })
  client.on("error", () => {})
  try {
    await client.connect()
    return client
  } catch (error) {
    if (process.env.CI === "true") throw new Error(`PostgreSQL is not reachable at ${pgUrl}: ${String(error)}`)
    console.warn(`!!! PostgreSQL is not reachable at ${pgUrl}: the PostgreSQL half of this test is left out`)
    return undefined
  }
}

/** Old holder a (token 5) and new holder b (token 6) interleaved on `resource`; the history. */
const interleave = async (resource: Resource) => {
  const records: Array<HistoryRecord> = []
  let now = 0
  const at = () => ++now
  const run = <A, E>(effect: Effect.Effect<A, E>) => Effect.runPromise(Effect.exit(effect))
  const res = resource.name
  for (const [id, w, token] of [["a", 0, 5], ["b", 1, 6]] as const) {
    records.push({ t: "invoke", w, id, guarded: false, wall: 0, mono: at() })
    records.push({ t: "acquired", w, id, token: String(token), mono: at() })
  }
  // a claims and reads, then is paused
  const aRead = await run(resource.claim(5n, "a"))
  assert(Exit.isSuccess(aRead))
  records.push({ t: "read", w: 0, id: "a", res, token: "5", ...aRead.value, entered: now, mono: at() })
  // b claims, reads and writes
  const bRead = await run(resource.claim(6n, "b"))
  assert(Exit.isSuccess(bRead))
  records.push({ t: "read", w: 1, id: "b", res, token: "6", ...bRead.value, entered: now, mono: at() })
  records.push({ t: "write", w: 1, id: "b", res, token: "6", n: bRead.value.n + 1, mono: at() })
  const bWrote = await run(resource.write(6n, { n: bRead.value.n + 1, writer: "b" }))
  records.push({ t: "wrote", w: 1, id: "b", res, outcome: Exit.isSuccess(bWrote) ? "ok" : "refused", mono: at() })
  // a wakes up and writes what it computed before
  records.push({ t: "write", w: 0, id: "a", res, token: "5", n: aRead.value.n + 1, mono: at() })
  const aWrote = await run(resource.write(5n, { n: aRead.value.n + 1, writer: "a" }))
  records.push({ t: "wrote", w: 0, id: "a", res, outcome: Exit.isSuccess(aWrote) ? "ok" : "refused", mono: at() })
  return { records, aAccepted: Exit.isSuccess(aWrote) }
}

const kinds = (violations: ReadonlyArray<{ readonly kind: ViolationKind }>) => new Set(violations.map((v) => v.kind))

describe.skipIf(skip)("chaos resources", () => {
  for (const fenced of [true, false]) {
    it(`${fenced ? "fenced: the stale write is refused, the history passes" : "fencing off (broken variant): the checker catches the stale write"}`, async () => {
      const server = await startRedisServer()
      const client = new Redis(server.url)
      const db = await connectPostgres()
      const run = `test-${fenced}-${process.pid}-${Date.now()}`
      const names = namesOf(run)
      try {
        const resources: Array<Resource> = [redis(client, names, fenced)]
        if (db !== undefined) {
          await db.query(
            `CREATE TABLE IF NOT EXISTS ${names.pgTable} (run text PRIMARY KEY, value integer NOT NULL, token bigint NOT NULL, writer text NOT NULL)`
          ).catch(() => {})
          await db.query(`INSERT INTO ${names.pgTable} (run, value, token, writer) VALUES ($1, 0, 0, '')`, [run])
          resources.push(postgres(db, names.pgTable, names.pgRow, fenced))
        }
        for (const resource of resources) {
          const { aAccepted, records } = await interleave(resource)
          const final = resource.name === "redis"
            ? { ...parseValue(await client.get(names.data)), token: "0" }
            : await db!.query<{ value: number; writer: string }>(
              `SELECT value, writer FROM ${names.pgTable} WHERE run = $1`,
              [run]
            ).then((r) => ({ n: r.rows[0]!.value, writer: r.rows[0]!.writer, token: "0" }))
          const { violations } = check(records, { [resource.name]: final }, { recoveryBoundMs: 0, workers: [] })
          if (fenced) {
            assert.isFalse(aAccepted, `${resource.name}: the stale write is refused`)
            assert.deepStrictEqual(violations, [], resource.name)
          } else {
            assert.isTrue(aAccepted, `${resource.name}: without the check the stale write goes through`)
            const found = kinds(violations)
            assert.isTrue(found.has("lost-update"), `${resource.name}: ${JSON.stringify(violations)}`)
            assert.isTrue(found.has("uncovered-write"), `${resource.name}: ${JSON.stringify(violations)}`)
          }
        }
      } finally {
        if (db !== undefined) {
          await db.query(`DELETE FROM ${names.pgTable} WHERE run = $1`, [run]).catch(() => {})
          await db.end()
        }
        client.disconnect()
        await server.stop()
      }
    })
  }
})
