/**
 * g. Promise-land: a caller that is not an Effect program, as an Express handler is, takes an
 * uncontended lock once per request and awaits it. effect-lock is called both ways such a caller
 * can: `ManagedRuntime.runPromise(withLock(key, body))` per operation, and the promise client
 * (`LockClient.make(layer).using(key, fn)`). The peers are called through their own promise APIs
 * (no Effect in between), and the bare ioredis pair is the floor: the same two `EVALSHA`s awaited
 * back to back.
 *
 * Like the serial scenario it runs in short rounds that take turns, and reports latency and the
 * process's CPU time per operation.
 */
import { Effect, ManagedRuntime } from "effect"
import { Redis } from "ioredis"
import { createHash } from "node:crypto"
import { readFileSync } from "node:fs"
import { Mutex } from "redis-semaphore"
import type { default as RedlockClass } from "../../node_modules/redlock/dist/index.js"
// @ts-expect-error redlock 5.0.0-beta.2's "exports" map has no "types" entry, so NodeNext cannot see its typings
import RedlockModule from "redlock"
import type * as EffectLock from "../../src/index.js"
import type * as EffectLockClient from "../../src/LockClient.js"
import type * as EffectLockRedisBackend from "../../src/RedisBackend.js"
import type { BenchContext } from "./common.js"
import { window } from "./common.js"
import type { SerialResult, SerialRound } from "./serial.js"

// From the build, as in peers.ts: what users install.
const build = "../../dist/index.js"
const buildClient = "../../dist/LockClient.js"
const buildRedis = "../../dist/RedisBackend.js"
const { withLock } = (await import(build)) as typeof EffectLock
const LockClient = (await import(buildClient)) as typeof EffectLockClient
const RedisBackend = (await import(buildRedis)) as typeof EffectLockRedisBackend
const Redlock = RedlockModule as typeof RedlockClass

export const PROMISE_ROUNDS = 3
const WARMUP_MS = 300
const ROUND_MS = 800
const MAX_OPS = 100_000

/** One promise-land caller: `once` takes and releases an uncontended lock; `close` tears down. */
interface PromiseCaller {
  readonly name: string
  readonly once: () => Promise<unknown>
  readonly close: () => Promise<void>
}

const script = (name: string) => {
  const source = readFileSync(new URL(`../../lua/${name}.lua`, import.meta.url), "utf8")
  return { source, sha: createHash("sha1").update(source).digest("hex") }
}

const connect = async (url: string, connectionName: string) => {
  const redis = new Redis(url, { lazyConnect: true, connectionName })
  await redis.connect()
  return redis
}

/** The callers, by name, each opened for one round and closed after it. */
export const promiseCallers: ReadonlyArray<readonly [string, (url: string, key: string) => Promise<PromiseCaller>]> = [
  ["effect-lock (runPromise)", async (url, key) => {
    const runtime = ManagedRuntime.make(RedisBackend.layer({ url }))
    await runtime.runPromise(Effect.void)
    const body = Effect.void
    return {
      name: "effect-lock (runPromise)",
      once: () => runtime.runPromise(withLock(key, body)),
      close: () => runtime.dispose()
    }
  }],
  ["effect-lock (LockClient)", async (url, key) => {
    const client = LockClient.make(RedisBackend.layer({ url }))
    const body = async () => undefined
    await client.using(key, body)
    return { name: "effect-lock (LockClient)", once: () => client.using(key, body), close: () => client.close() }
  }],
  ["redis-semaphore", async (url, key) => {
    const redis = await connect(url, "bench-promise")
    return {
      name: "redis-semaphore",
      once: async () => {
        const mutex = new Mutex(redis, key)
        await mutex.acquire()
        await mutex.release()
      },
      close: async () => void (await redis.quit())
    }
  }],
  ["redlock", async (url, key) => {
    const redis = await connect(url, "bench-promise")
    const redlock = new Redlock([redis], { retryCount: -1 })
    const body = async () => undefined
    return {
      name: "redlock",
      once: () => redlock.using([key], 30_000, body),
      close: async () => void (await redis.quit())
    }
  }],
  ["ioredis pair (floor)", async (url, key) => {
    const redis = await connect(url, "bench-promise")
    const acquire = script("acquire")
    const release = script("release")
    await redis.script("LOAD", acquire.source)
    await redis.script("LOAD", release.source)
    const token = `redisson_lock_token:{${key}}`
    const channel = `redisson_lock__channel:{${key}}`
    return {
      name: "ioredis pair (floor)",
      once: async () => {
        await redis.evalsha(acquire.sha, 2, key, token, "30000", "floor-owner", "1")
        await redis.evalsha(release.sha, 2, key, channel, "floor-owner", "0", "publish")
      },
      close: async () => void (await redis.quit())
    }
  }]
]

/** `once` back to back for `ms` after `warmupMs`, awaited as a promise loop (no Effect around it). */
const promiseLoop = async (once: () => Promise<unknown>, warmupMs: number, ms: number): Promise<SerialRound> => {
  const warmupEnd = performance.now() + warmupMs
  while (performance.now() < warmupEnd) await once()
  const samples: Array<number> = []
  const cpuBefore = process.cpuUsage()
  const start = performance.now()
  const end = start + ms
  let t = start
  while (t < end && samples.length < MAX_OPS) {
    await once()
    const after = performance.now()
    samples.push((after - t) * 1000)
    t = after
  }
  const cpu = process.cpuUsage(cpuBefore)
  return { samples, seconds: (t - start) / 1000, cpuMicros: cpu.user + cpu.system }
}

/** One round of one caller, on an empty server. */
export const promiseRound = (
  ctx: BenchContext,
  open: (url: string, key: string) => Promise<PromiseCaller>,
  name: string
): Effect.Effect<SerialRound, Error> =>
  Effect.tryPromise({
    try: async () => {
      await ctx.admin.flushAll()
      const caller = await open(ctx.url, `bench:promise:${name.replace(/\W+/g, "-")}`)
      try {
        return await promiseLoop(caller.once, window(ctx, WARMUP_MS), window(ctx, ROUND_MS))
      } finally {
        await caller.close()
      }
    },
    catch: (cause) => cause instanceof Error ? cause : new Error(String(cause))
  })

export type PromiseResult = SerialResult
