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
 * Node, serially and from 64 concurrent loops on distinct keys, on a client with ioredis' default
 * options and on one with auto-pipelining on (as effect-lock's command connection has it). It
 * separates what Node and ioredis cost from what a lock library adds.
 */
import { Context, Effect, Layer } from "effect"
import { Redis } from "ioredis"
import { spawn } from "node:child_process"
import { createHash } from "node:crypto"
import { readFileSync } from "node:fs"
import type * as EffectLock from "../../src/index.js"
import type * as EffectLockRedisBackend from "../../src/RedisBackend.js"
import type { Summary } from "../support/stats.js"
import type { BenchContext } from "./common.js"
import { window } from "./common.js"
import type { DistinctRound } from "./distinct.js"
import { concurrentLoops } from "./distinct.js"
import type { SerialRound } from "./serial.js"
import { timeLoop } from "./serial.js"

export interface RedisBenchmarkResult {
  readonly clients: number
  readonly requests: number
  readonly requestsPerSecond: number
  /** Milliseconds. */
  readonly p50: number
  readonly p99: number
  readonly command: string
}

/**
 * The floors: a bare ioredis client with its defaults or with auto-pipelining, and effect-lock's
 * own backend primitives (`tryAcquire` + `release` through `RedisBackend`'s connection, without a
 * hold, a watchdog or a guarded program): the rung between the bare pair and a whole `withLock`.
 */
export type FloorClient = "default" | "autoPipelining" | "primitives"

export interface FloorResult {
  readonly client: FloorClient
  /** Acquire + release pairs, one loop: microseconds. */
  readonly serial: {
    readonly opsPerSecond: number
    readonly latency: Summary
    readonly cpuMicrosPerOp: number
    readonly serverMicrosPerOp?: number | undefined
  }
  /** Acquire + release pairs from 64 loops on distinct keys. */
  readonly distinctOpsPerSecond: number
}

export interface RawResult {
  readonly acquireSha: string
  /** One client, one run per serial round. */
  readonly single: ReadonlyArray<RedisBenchmarkResult>
  /** The single-client p50 across rounds (median), in milliseconds. */
  readonly singleP50: number
  readonly fifty: RedisBenchmarkResult
  readonly floors: ReadonlyArray<FloorResult>
}

const script = (name: string) => {
  const source = readFileSync(new URL(`../../lua/${name}.lua`, import.meta.url), "utf8")
  return { source, sha: createHash("sha1").update(source).digest("hex") }
}

/** `SCRIPT LOAD` the acquire script through the admin connection; its SHA1. */
export const loadAcquire = (ctx: BenchContext) =>
  Effect.promise(async () => {
    const acquire = script("acquire")
    await ctx.admin.redis.script("LOAD", acquire.source)
    return acquire.sha
  })

export const redisBenchmark = (ctx: BenchContext, sha: string, clients: number, requests: number) =>
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
      const lines = out.split("\n")
      const header = lines.findIndex((line) => line.startsWith("\"test\""))
      const row = lines[header + 1]
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

/** A bare ioredis client with effect-lock's two scripts loaded, closed with the scope. */
const floorClient = (ctx: BenchContext, client: FloorClient) =>
  client === "primitives" ? primitivesClient(ctx) : Effect.acquireRelease(
    Effect.promise(async () => {
      const redis = new Redis(ctx.url, {
        lazyConnect: true,
        connectionName: "bench-floor",
        enableAutoPipelining: client === "autoPipelining"
      })
      await redis.connect()
      const acquire = script("acquire")
      const release = script("release")
      await redis.script("LOAD", acquire.source)
      await redis.script("LOAD", release.source)
      const pair = (key: string) =>
        Effect.promise(async () => {
          await redis.evalsha(acquire.sha, 2, key, `redisson_lock_token:{${key}}`, "30000", "floor-owner", "1")
          await redis.evalsha(release.sha, 2, key, `redisson_lock__channel:{${key}}`, "floor-owner", "0", "publish")
        })
      return { redis, pair }
    }),
    ({ redis }) => Effect.sync(() => redis.disconnect())
  )

// effect-lock from its build, as in peers.ts: what its users run.
const effectLockBuild = "../../dist/index.js"
const effectLockRedisBuild = "../../dist/RedisBackend.js"
const { LockBackend } = (await import(effectLockBuild)) as typeof EffectLock
const RedisBackend = (await import(effectLockRedisBuild)) as typeof EffectLockRedisBackend

/** The backend's own `tryAcquire` + `release`, one owner per pair, on `RedisBackend.layer({ url })`. */
const primitivesClient = (ctx: BenchContext) =>
  Effect.map(
    Effect.orDie(Layer.build(RedisBackend.layer({ url: ctx.url }))),
    (context) => {
      const { primitives } = Context.get(context, LockBackend)
      let n = 0
      const pair = (key: string) =>
        Effect.suspend(() => {
          const owner = `floor-owner:${++n}`
          return Effect.zipRight(
            primitives.tryAcquire({ key, owner, leaseMillis: 30_000, fencing: true, waiting: false }),
            primitives.release(key, owner)
          )
        }).pipe(Effect.orDie, Effect.asVoid)
      return { pair }
    }
  )

export const floorSerialRound = (ctx: BenchContext, client: FloorClient): Effect.Effect<SerialRound> =>
  Effect.scoped(
    Effect.flatMap(floorClient(ctx, client), ({ pair }) =>
      timeLoop(pair("bench:floor"), window(ctx, 300), window(ctx, 800), ctx.admin.serverMicros))
  )

export const floorDistinctRound = (ctx: BenchContext, client: FloorClient): Effect.Effect<DistinctRound> =>
  Effect.scoped(
    Effect.flatMap(floorClient(ctx, client), ({ pair }) => concurrentLoops(ctx, 64, (i) => pair(`bench:floor:${i}`)))
  )

export const median = (values: ReadonlyArray<number>): number => {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted.length === 0 ? Number.NaN : sorted[Math.floor((sorted.length - 1) / 2)]!
}
