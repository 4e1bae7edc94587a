/**
 * The demo (`npm start`) in its multi-process mode: three OS processes contend on the same keys
 * through a redis-server of the test's own, the overlap check and the counter live in Redis, and
 * the run leaves no key behind (fencing counters included). Also: DEMO_PROCESSES without
 * REDIS_URL says why that cannot work and runs one process.
 */
import { Redis } from "ioredis"
import { execFile } from "node:child_process"
import { fileURLToPath } from "node:url"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import type { RedisServer } from "./support/redisServer.js"
import { skipRedis, startRedisServer } from "./support/redisServer.js"

const root = fileURLToPath(new URL("..", import.meta.url))
const tsx = fileURLToPath(new URL("../node_modules/tsx/dist/cli.mjs", import.meta.url))

interface Run {
  readonly code: number | null
  readonly stdout: string
  readonly stderr: string
}

const demo = (env: Record<string, string | undefined>): Promise<Run> =>
  new Promise((resolve) => {
    const { REDIS_URL: _ignored, DEMO_PROCESSES: _too, ...inherited } = process.env
    execFile(
      process.execPath,
      [tsx, "examples/demo.ts"],
      { cwd: root, env: { ...inherited, NO_COLOR: "1", ...env }, timeout: 100_000 },
      (error, stdout, stderr) => {
        const code = error === null ? 0 : typeof error.code === "number" ? error.code : null
        resolve({ code, stdout, stderr })
      }
    )
  })

/** The number after `label` in the demo's summary. */
const figure = (stdout: string, label: string): number => {
  const match = new RegExp(`^  ${label}\\s+(\\d+)`, "m").exec(stdout)
  if (match === null) throw new Error(`no "${label}" in the demo's output:\n${stdout}`)
  return Number(match[1])
}

describe.skipIf(skipRedis(true))("npm start with REDIS_URL and DEMO_PROCESSES=3", () => {
  let server: RedisServer
  beforeAll(async () => {
    server = await startRedisServer()
  })
  afterAll(async () => {
    await server?.stop()
  })

  it("three processes contend through Redis: no overlap, an exact counter, nothing left behind", async () => {
    const run = await demo({ REDIS_URL: server.url, DEMO_PROCESSES: "3", DEMO_SECONDS: "2" })
    expect(run.stderr).toBe("")
    expect(run.code, run.stdout).toBe(0)
    expect(run.stdout).toMatch(/^effect-lock demo: 3 processes × 8 workers, 3 keys, 2 s on Redis/m)

    const perProcess = [0, 1, 2].map((i) => figure(run.stdout, `process ${i}`))
    for (const n of perProcess) expect(n).toBeGreaterThan(0)
    const acquisitions = figure(run.stdout, "acquisitions")
    expect(acquisitions).toBe(perProcess.reduce((a, b) => a + b, 0))
    // the counter was read and written back by the holders (a read-sleep-write, fenced): exact
    expect(figure(run.stdout, "counter in Redis")).toBe(acquisitions)
    expect(run.stdout).toMatch(/^ {2}counter in Redis .*: exact$/m)
    expect(figure(run.stdout, "overlaps")).toBe(0)
    expect(run.stdout).toMatch(/^ {2}tokens monotonic {3}yes$/m)
    // the processes really took turns
    expect(figure(run.stdout, "between processes")).toBeGreaterThan(0)
    expect(run.stdout).toMatch(/^OK$/m)

    // the locks, their fencing counters, the fences and the demo's records are all gone
    expect(run.stdout).toMatch(/^cleaned up: \d+ key\(s\) of the run deleted, none left$/m)
    const admin = new Redis(server.url)
    try {
      expect(await admin.dbsize()).toBe(0)
    } finally {
      await admin.quit()
    }
  }, 120_000)
})

describe("npm start with DEMO_PROCESSES but no REDIS_URL", () => {
  it("says why several processes need Redis, and runs one process on memory", async () => {
    const run = await demo({ DEMO_PROCESSES: "3", DEMO_SECONDS: "1" })
    expect(run.code, run.stdout + run.stderr).toBe(0)
    expect(run.stdout).toContain("DEMO_PROCESSES=3 needs REDIS_URL")
    expect(run.stdout).toMatch(/^effect-lock demo: 24 workers, 3 keys, 1 s on the memory backend$/m)
    expect(figure(run.stdout, "overlaps")).toBe(0)
    expect(run.stdout).toMatch(/^OK$/m)
  }, 60_000)
})
