/**
 * The raw limit: what Redis itself does with effect-lock's acquire script, with no library around
 * it, and what a bare ioredis client in this Node process does with the same two scripts.
 *
 * `redis-benchmark` runs `EVALSHA <acquire.lua> 2 bench:raw:__rand_int__ bench:raw:token 1000
 * raw-owner 1` with `-r 1000000`: every call names a random lock out of a million, so nearly every
 * call takes the fresh-lock path (EXISTS, HINCRBY, PEXPIRE, INCR, GET: the work of a real
 * acquisition with a fencing token); the few repeats take the reentry path, which does as much
 * work. The 1 s lease keeps the key space from growing. One client gives the round-trip latency
 * the serial target is measured against; 50 clients give the server's throughput.
 *
 * The ioredis floor runs the acquire and release scripts as a pair (one critical section) from
 * Node on a client configured like effect-lock's (auto-pipelining on): serially, and from 64
 * concurrent loops on distinct keys. It separates what Node and ioredis cost from what a lock
 * library adds.
 */
import { spawn } from "node:child_process"
import { createHash } from "node:crypto"
import { readFileSync } from "node:fs"
import { Effect } from "effect"
import { Redis } from "ioredis"
import type { Summary } from "../support/stats.js"
import { now, summarize } from "../support/stats.js"
import type { BenchContext } from "./common.js"
import { window } from "./common.js"

export interface RedisBenchmarkResult {
  readonly clients: number
  readonly requests: number
  readonly requestsPerSecond: number
  /** Milliseconds. */
  readonly p50: number
  readonly p99: number
  readonly command: string
}

export interface RawResult {
  readonly acquireSha: string
  readonly single: RedisBenchmarkResult
  readonly fifty: RedisBenchmarkResult
  /** ioredis acquire + release pair, one loop: microseconds. */
  readonly ioredisSerial: { readonly opsPerSecond: number; readonly latency: Summary }
  /** ioredis acquire + release pairs from 64 loops on distinct keys. */
  readonly ioredisDistinct: { readonly opsPerSecond: number }
}

const script = (name: string) => {
  const source = readFileSync(new URL(`../../lua/${name}.lua`, import.meta.url), "utf8")
  return { source, sha: createHash("sha1").update(source).digest("hex") }
}

const redisBenchmark = (ctx: BenchContext, sha: string, clients: number, requests: number) =>
  Effect.async<RedisBenchmarkResult, Error>((resume) => {
    const args = ["-h", ctx.host, "-p", String(ctx.port), "-n", String(requests), "-c", String(clients)]
    const url = new URL(ctx.url)
    if (url.password !== "") args.push("-a", decodeURIComponent(url.password), "--no-auth-warning")
    if (url.username !== "") args.push("--user", decodeURIComponent(url.username))
    const command = ["EVALSHA", sha, "2", "bench:raw:__rand_int__", "bench:raw:token", "1000", "raw-owner", "1"]
    args.push("-r", "1000000", "--csv", ...command)
    const child = spawn("redis-benchmark", args, { stdio: ["ignore", "pipe", "pipe"] })
    let out = ""
    let err = ""
    child.stdout.on("data", (chunk) => (out += chunk))
    child.stderr.on("data", (chunk) => (err += chunk))
    child.on("error", (error) => resume(Effect.fail(error)))
    child.on("close", (code) => {
      const header = out.split("\n").findIndex((line) => line.startsWith("\"test\""))
      const row = out.split("\n")[header + 1]
      if (code !== 0 || header < 0 || row === undefined) {
        return resume(Effect.fail(new Error(`redis-benchmark exited with ${code}: ${err || out}`)))
      }
      const cells = row.split("\",\"").map((cell) => cell.replace(/"/g, ""))
      resume(Effect.succeed({
        clients,
        requests,
        requestsPerSecond: Number(cells[1]),
        p50: Number(cells[4]),
        p99: Number(cells[6]),
        command: `redis-benchmark -p PORT -n ${requests} -c ${clients} -r 1000000 ${
          command.join(" ").replace(sha, "<sha1 of lua/acquire.lua>")
        }`
      }))
    })
    return Effect.sync(() => child.kill())
  })

const ioredisFloor = (ctx: BenchContext) =>
  Effect.acquireUseRelease(
    Effect.promise(async () => {
      const redis = new Redis(ctx.url, { enableAutoPipelining: true, lazyConnect: true, connectionName: "bench-floor" })
      await redis.connect()
      return redis
    }),
    (redis) =>
      Effect.promise(async () => {
        const acquire = script("acquire")
        const release = script("release")
        await redis.script("LOAD", acquire.source)
        await redis.script("LOAD", release.source)
        const pair = async (key: string) => {
          await redis.evalsha(acquire.sha, 2, key, `redisson_lock_token:{${key}}`, "30000", "floor-owner", "1")
          await redis.evalsha(release.sha, 2, key, `redisson_lock__channel:{${key}}`, "floor-owner", "0")
        }
        // Serial.
        let end = now() + window(ctx, 500)
        while (now() < end) await pair("bench:floor")
        const samples: Array<number> = []
        const start = now()
        end = start + window(ctx, 2_000)
        let t = start
        while (t < end) {
          await pair("bench:floor")
          const after = now()
          samples.push((after - t) * 1000)
          t = after
        }
        const serial = { opsPerSecond: samples.length / ((t - start) / 1000), latency: summarize(samples) }
        // 64 loops on distinct keys.
        let ops = 0
        let stop = false
        let measuring = false
        const loops = Array.from({ length: 64 }, async (_, i) => {
          while (!stop) {
            await pair(`bench:floor:${i}`)
            if (measuring) ops++
          }
        })
        await new Promise((resolve) => setTimeout(resolve, window(ctx, 500)))
        measuring = true
        const distinctStart = now()
        await new Promise((resolve) => setTimeout(resolve, window(ctx, 2_500)))
        measuring = false
        const distinctSeconds = (now() - distinctStart) / 1000
        stop = true
        await Promise.all(loops)
        return { serial, distinct: { opsPerSecond: ops / distinctSeconds } }
      }),
    (redis) => Effect.sync(() => redis.disconnect())
  )

export const raw = (ctx: BenchContext) =>
  Effect.gen(function*() {
    yield* Effect.promise(() => ctx.admin.flushAll())
    const acquire = script("acquire")
    yield* Effect.promise(() => ctx.admin.redis.script("LOAD", acquire.source))
    const single = yield* redisBenchmark(ctx, acquire.sha, 1, Math.round(30_000 * Math.min(1, ctx.scale * 2)))
    const fifty = yield* redisBenchmark(ctx, acquire.sha, 50, Math.round(150_000 * Math.min(1, ctx.scale * 2)))
    yield* Effect.promise(() => ctx.admin.flushAll())
    const floor = yield* ioredisFloor(ctx)
    return {
      acquireSha: acquire.sha,
      single,
      fifty,
      ioredisSerial: floor.serial,
      ioredisDistinct: floor.distinct
    } satisfies RawResult
  })
