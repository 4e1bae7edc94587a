/**
 * The semaphore in RedissonPermitExpirableSemaphore's layout: the free count at the name, the
 * timeout set `{<name>}:timeout` scored by the end of each permit's lease (ms), the channel
 * `redisson_sc:{<name>}` carrying the free count. The Redisson side below is a client written for
 * this test against that protocol (as Redisson 4.7's scripts act on it: the client's own clock,
 * 16-byte binary permit ids, expired permits given back by whoever sees them first), not Redisson's
 * code.
 */
import { afterAll, assert, beforeAll, describe, it } from "@effect/vitest"
import { Duration, Effect, Fiber, Option, Schedule } from "effect"
import type { Redis } from "ioredis"
import { randomBytes } from "node:crypto"
import { LockBackend, Semaphore } from "../../src/index.js"
import * as RedisBackend from "../../src/RedisBackend.js"
import type { RedisServer } from "../support/redisServer.js"
import { skipRedis, startRedisServer } from "../support/redisServer.js"
import { admin, cmd } from "./helpers.js"

/** Redisson's naming (RedissonObject.prefixName / suffixName). */
const prefixName = (kind: string, name: string) => name.includes("{") ? `${kind}:${name}` : `${kind}:{${name}}`
const suffixName = (name: string, suffix: string) => name.includes("{") ? `${name}:${suffix}` : `{${name}}:${suffix}`

/** Give back expired permits, then take ARGV[1] ids (ARGV[4..]) scored ARGV[2] if enough are free. */
const javaTryAcquire = `
local expired = redis.call('zrangebyscore', KEYS[2], 0, ARGV[3])
if #expired > 0 then
  redis.call('zrem', KEYS[2], unpack(expired))
  local value = redis.call('incrby', KEYS[1], #expired)
  if value > 0 then redis.call('publish', KEYS[3], value) end
end
local free = tonumber(redis.call('get', KEYS[1]) or '0')
if free < tonumber(ARGV[1]) then return 0 end
redis.call('decrby', KEYS[1], ARGV[1])
for i = 4, #ARGV do redis.call('zadd', KEYS[2], ARGV[2], ARGV[i]) end
return 1`

/** Remove the ids ARGV[1..]; give their permits back and publish how many. */
const javaRelease = `
local removed = redis.call('zrem', KEYS[2], unpack(ARGV))
if removed == 0 then return 0 end
redis.call('incrby', KEYS[1], removed)
redis.call('publish', KEYS[3], removed)
return removed`

/** Free permits after giving back expired ones (availablePermits), by the client's clock ARGV[1]. */
const javaAvailable = `
local expired = redis.call('zrangebyscore', KEYS[2], 0, ARGV[1])
if #expired > 0 then
  redis.call('zrem', KEYS[2], unpack(expired))
  redis.call('incrby', KEYS[1], #expired)
end
return tonumber(redis.call('get', KEYS[1]) or '0')`

const javaClient = (redis: Redis, name: string) => {
  const keys = [name, suffixName(name, "timeout"), prefixName("redisson_sc", name)]
  return {
    tryAcquire: (ids: ReadonlyArray<Buffer>, leaseMillis: number) =>
      Effect.promise(() =>
        redis.eval(javaTryAcquire, 3, ...keys, ids.length, Date.now() + leaseMillis, Date.now(), ...ids) as Promise<
          number
        >
      ),
    release: (ids: ReadonlyArray<Buffer>) =>
      Effect.promise(() => redis.eval(javaRelease, 3, ...keys, ...ids) as Promise<number>),
    available: Effect.promise(() => redis.eval(javaAvailable, 3, ...keys, Date.now()) as Promise<number>)
  }
}

let seq = 0
const prefix = "svc:"

describe.skipIf(skipRedis())("Semaphore: Redisson's layout and a Redisson client on the same name", () => {
  let server: RedisServer
  beforeAll(async () => {
    server = await startRedisServer()
  })
  afterAll(() => server?.stop())

  const provide = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
    Effect.provide(effect, RedisBackend.layer({ url: server.url, prefix }))

  for (
    const [label, makeKey] of [
      ["a plain name", () => `pool:${process.pid}:${++seq}`],
      ["a hash-tagged name", () => `{tenant-${process.pid}}:pool:${++seq}`]
    ] as const
  ) {
    it.scopedLive(`our permits are Redisson's: free count, timeout set, channel (${label})`, () =>
      Effect.gen(function*() {
        const key = makeKey()
        const name = prefix + key
        const redis = yield* admin(server.url)
        const listener = yield* admin(server.url)
        const messages: Array<string> = []
        listener.on("message", (_: string, message: string) => messages.push(message))
        yield* Effect.promise(() => listener.subscribe(prefixName("redisson_sc", name)))
        yield* Effect.scoped(Effect.gen(function*() {
          yield* Semaphore.acquire(key, 2, { permits: 5, lease: "10 seconds" })
          assert.strictEqual(yield* cmd(redis, "GET", name), "3")
          const members = yield* cmd<Array<string>>(redis, "ZRANGE", suffixName(name, "timeout"), 0, -1, "WITHSCORES")
          assert.strictEqual(members.length, 4)
          const [seconds] = yield* cmd<[string, string]>(redis, "TIME")
          const ends = Number(members[1])
          assert.isAbove(ends, Number(seconds) * 1000 + 8_000)
          assert.isAtMost(ends, Number(seconds) * 1000 + 11_000)
          assert.strictEqual(yield* javaClient(redis, name).available, 3)
        }))
        assert.strictEqual(yield* cmd(redis, "GET", name), "5")
        assert.strictEqual(yield* cmd(redis, "ZCARD", suffixName(name, "timeout")), 0)
        yield* Effect.sleep(100)
        assert.deepStrictEqual(messages, ["5"])
      }).pipe(provide))
  }

  it.scopedLive("permits Redisson holds are counted; Redisson's release wakes our waiter by notification", () =>
    Effect.gen(function*() {
      const key = `pool:${process.pid}:${++seq}`
      const redis = yield* admin(server.url)
      const java = javaClient(redis, prefix + key)
      yield* Semaphore.setPermits(key, 3)
      const ids = [randomBytes(16), randomBytes(16)]
      assert.strictEqual(yield* java.tryAcquire(ids, 60_000), 1)
      assert.strictEqual(yield* Semaphore.available(key), 1)
      assert.deepStrictEqual(yield* Semaphore.inspect(key), { key, available: 1, acquired: 2, total: 3 })
      assert.isTrue(Option.isNone(yield* Effect.scoped(Semaphore.tryAcquire(key, 2))))
      const waiter = yield* Effect.fork(
        Effect.timed(Semaphore.withPermits(key, 3, Effect.succeed("in"), { retry: Schedule.spaced("1 hour") }))
      )
      yield* Effect.sleep(200)
      assert.isTrue(Option.isNone(yield* Fiber.poll(waiter)))
      assert.strictEqual(yield* java.release(ids), 2)
      const [waited, value] = yield* Fiber.join(waiter)
      assert.strictEqual(value, "in")
      assert.isBelow(Duration.toMillis(waited), 30_000, "woken by the release, not by Redisson's 60 s lease")
    }).pipe(provide))

  it.scopedLive("while we hold permits, Redisson gets only the rest; our expired permits are given back by Redisson", () =>
    Effect.gen(function*() {
      const key = `pool:${process.pid}:${++seq}`
      const redis = yield* admin(server.url)
      const java = javaClient(redis, prefix + key)
      const backend = yield* LockBackend
      const semaphore = backend.primitives.semaphore
      if (semaphore === undefined) return yield* Effect.dieMessage("no semaphore primitives")
      // A holder that crashes: 2 permits, a 300 ms lease, never renewed.
      const taken = yield* semaphore.tryAcquire({
        key,
        owner: "crashed:1",
        permits: 2,
        total: 3,
        leaseMillis: 300,
        fencing: true
      })
      assert.strictEqual(taken._tag, "Acquired")
      assert.strictEqual(yield* java.tryAcquire([randomBytes(16), randomBytes(16)], 60_000), 0)
      yield* Effect.sleep(400)
      // Redisson's own clock finds our lease over and gives the permits back.
      assert.strictEqual(yield* java.available, 3)
      assert.strictEqual(yield* java.tryAcquire([randomBytes(16), randomBytes(16)], 60_000), 1)
      assert.deepStrictEqual(yield* Semaphore.inspect(key), { key, available: 1, acquired: 2, total: 3 })
    }).pipe(provide))
})
