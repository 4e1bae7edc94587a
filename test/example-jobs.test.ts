/**
 * `npm run example:jobs` runs to the end on a redis-server of the test's own and the PostgreSQL at
 * 127.0.0.1:5432 (or `JOBS_PG_URL`): three worker processes, a frozen worker whose late write the
 * database refuses, every check passed, and nothing left behind in either store.
 *
 * PostgreSQL is required: without it this test fails (it is never skipped) and says how to
 * provide one.
 */
import { execFile } from "node:child_process"
import { resolve } from "node:path"
import { fileURLToPath } from "node:url"
import { promisify } from "node:util"
import pg from "pg"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { defaultUrl } from "../examples/jobs/db.js"
import { type RedisServer, skipRedis, startRedisServer } from "./support/redisServer.js"

const exec = promisify(execFile)
const root = resolve(fileURLToPath(import.meta.url), "..", "..")
const pgUrl = process.env.JOBS_PG_URL ?? defaultUrl
const skip = skipRedis(true)

let server: RedisServer

beforeAll(async () => {
  if (!skip) server = await startRedisServer()
})
afterAll(async () => {
  await server?.stop()
})

const query = async (text: string, values: Array<unknown> = []) => {
  const client = new pg.Client({ connectionString: pgUrl, connectionTimeoutMillis: 5_000 })
  try {
    await client.connect()
  } catch (error) {
    const where = new URL(pgUrl)
    throw new Error(
      `example:jobs needs PostgreSQL at ${where.hostname}:${where.port || "5432"}${where.pathname} ` +
        `(trust authentication, or credentials in JOBS_PG_URL); it could not connect: ${String(error)}`
    )
  }
  try {
    return await client.query(text, values)
  } finally {
    await client.end()
  }
}

describe.skipIf(skip)("examples/jobs", () => {
  it("runs: a frozen worker's late write is refused by PostgreSQL, every job is written once", async () => {
    await query("SELECT 1")
    const { stdout } = await exec("npm", ["run", "--silent", "example:jobs"], {
      cwd: root,
      env: { ...process.env, REDIS_URL: server.url, JOBS_PG_URL: pgUrl },
      maxBuffer: 16 * 1024 * 1024
    }).catch((error: { stdout?: string; stderr?: string; message: string }) => {
      throw new Error(`example:jobs failed:\n${error.stdout ?? ""}\n${error.stderr ?? ""}\n${error.message}`)
    })
    const run = /^job runner ([0-9a-f]+):/m.exec(stdout)?.[1]
    expect(run, stdout).toBeDefined()
    expect(stdout).toMatch(/w2 froze \(SIGSTOP\) just before writing (job-\d+) with token (\d+)/)
    const [, job, token] = /w2 froze \(SIGSTOP\) just before writing (job-\d+) with token (\d+)/.exec(stdout)!
    expect(stdout).toContain(`w2 wrote ${job} with token ${token}: REFUSED by PostgreSQL`)
    expect(stdout).toMatch(new RegExp(`w[13] wrote ${job} with token \\d+: admitted`))
    expect(stdout).not.toContain("FAIL")
    expect(stdout.match(/^ {2}ok {4}/gm)).toHaveLength(4)
    // Nothing left behind: no rows of the run, no keys on the server.
    const rows = await query("SELECT count(*)::int AS n FROM effect_lock_job_results WHERE run = $1", [run])
    expect(rows.rows[0]).toEqual({ n: 0 })
    const { stdout: keys } = await exec("redis-cli", ["-p", String(server.port), "--raw", "DBSIZE"])
    expect(keys.trim()).toBe("0")
  }, 600_000)
})
