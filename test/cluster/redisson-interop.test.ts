/**
 * effect-lock and Redisson 4.7 in cluster mode, on one real 3-master, 3-replica cluster started
 * for this file. The test plays Redisson's RLock by running the scripts Redisson 4.7.0 sends
 * (RedissonLock.tryLockInnerAsync, RedissonLock.unlockInnerAsync with its unlock latch and the
 * publish command as an argument, `getPublishCommand()` = `SPUBLISH` on a sharding-capable
 * cluster, and the watchdog's renewal, renewal/LockTask) with Redisson's lock-name field
 * `<client uuid>:<thread id>`, and by waiting as Redisson waits: a sharded subscription to
 * `redisson_lock__channel:{name}` on the lock's master, woken by any message, or by the holder's
 * PTTL.
 *
 * The lock and Redisson's companion keys (channel, unlock latch) are named with Redisson's
 * `prefixName`, so they share the lock's slot; the tests use a plain name (Redisson adds the
 * braces) and a hash-tagged one (it adds none).
 */
import { afterAll, assert, beforeAll, describe, it } from "@effect/vitest"
import { Deferred, Duration, Effect, Fiber, Layer, Option, Schedule } from "effect"
import type { Cluster } from "ioredis"
import { randomUUID } from "node:crypto"
import { withLock } from "../../src/index.js"
import type { RedisCluster } from "../support/redisCluster.js"
import { startRedisCluster } from "../support/redisCluster.js"
import { clusterAdmin, clusterBackend, skipCluster } from "./helpers.js"

/**
 * RedissonLock.tryLockInnerAsync (4.7.0): KEYS[1] lock; ARGV[1] lease ms, ARGV[2] lock name.
 * nil = acquired (or re-entered), else the holder's PTTL.
 */
const tryLockScript = "if ((redis.call('exists', KEYS[1]) == 0) " +
  "or (redis.call('hexists', KEYS[1], ARGV[2]) == 1)) then " +
  "redis.call('hincrby', KEYS[1], ARGV[2], 1); " +
  "redis.call('pexpire', KEYS[1], ARGV[1]); " +
  "return nil; " +
  "end; " +
  "return redis.call('pttl', KEYS[1]);"

/**
 * RedissonLock.unlockInnerAsync (4.7.0): KEYS[1] lock, KEYS[2] channel, KEYS[3] unlock latch
 * (`redisson_unlock_latch:{name}:<request id>`, which makes a retried unlock idempotent); ARGV[1]
 * message (0), ARGV[2] lease ms, ARGV[3] lock name, ARGV[4] publish command, ARGV[5] latch ttl.
 * 1 = released, 0 = still held, nil = not held.
 */
const unlockScript = "local val = redis.call('get', KEYS[3]); " +
  "if val ~= false then " +
  "return tonumber(val);" +
  "end; " +
  "if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then " +
  "return nil;" +
  "end; " +
  "local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1); " +
  "if (counter > 0) then " +
  "redis.call('pexpire', KEYS[1], ARGV[2]); " +
  "redis.call('set', KEYS[3], 0, 'px', ARGV[5]); " +
  "return 0; " +
  "else " +
  "redis.call('del', KEYS[1]); " +
  "redis.call(ARGV[4], KEYS[2], ARGV[1]); " +
  "redis.call('set', KEYS[3], 1, 'px', ARGV[5]); " +
  "return 1; " +
  "end; "

/** renewal/LockTask (4.7.0), for one lock: KEYS[i] lock, ARGV[1] lease, ARGV[i + 1] lock name. */
const renewScript = "local result = {} " +
  "for i = 1, #KEYS, 1 do " +
  "if (redis.call('hexists', KEYS[i], ARGV[i + 1]) == 1) then " +
  "redis.call('pexpire', KEYS[i], ARGV[1]); " +
  "table.insert(result, 1); " +
  "else " +
  "table.insert(result, 0); " +
  "end; " +
  "end; " +
  "return result;"

/** RedissonObject.prefixName. */
const prefixName = (kind: string, name: string) => name.includes("{") ? `${kind}:${name}` : `${kind}:{${name}}`

/** Redisson's default lockWatchdogTimeout. */
const redissonLease = 30_000

/**
 * One Redisson client (a JVM) on lock `name`, thread `thread`: tryLock, unlock and renew run
 * Redisson's scripts; `lock` waits as RLock.lock() does, on the sharded subscription `messages`
 * (one per client, as Redisson's PublishSubscribeService keeps one) or the PTTL.
 */
const redissonClient = (admin: Cluster, name: string) => {
  const clientId = randomUUID()
  const channel = prefixName("redisson_lock__channel", name)
  const wakers = new Set<() => void>()
  const onMessage = (ch: string) => {
    if (ch !== channel) return
    for (const wake of Array.from(wakers)) wake()
  }
  admin.on("smessage", onMessage)
  const subscribed = Effect.promise(() => admin.ssubscribe(channel))
  const thread = (id: number) => {
    const lockName = `${clientId}:${id}`
    const tryLock = Effect.promise(() =>
      admin.eval(tryLockScript, 1, name, redissonLease, lockName) as Promise<number | null>
    )
    const unlock = Effect.promise(async () => {
      const requestId = randomUUID()
      const latch = `${prefixName("redisson_unlock_latch", name)}:${requestId}`
      const result = await admin.eval(
        unlockScript,
        3,
        name,
        channel,
        latch,
        0,
        redissonLease,
        lockName,
        "spublish",
        10_000
      ) as
        | number
        | null
      await admin.del(latch)
      return result
    })
    const renew = Effect.promise(() =>
      admin.eval(renewScript, 1, name, redissonLease, lockName) as Promise<Array<number>>
    )
    /** RLock.lock(): try, then wait for a message or the PTTL, and try again. Returns how many waits it took. */
    const lock = Effect.gen(function*() {
      let waits = 0
      for (;;) {
        const ttl = yield* tryLock
        if (ttl === null) return waits
        waits++
        yield* Effect.async<void>((resume) => {
          const wake = () => {
            wakers.delete(wake)
            clearTimeout(timer)
            resume(Effect.void)
          }
          const timer = setTimeout(wake, ttl)
          wakers.add(wake)
          return Effect.sync(() => {
            wakers.delete(wake)
            clearTimeout(timer)
          })
        })
      }
    })
    return { lockName, tryLock, unlock, renew, lock }
  }
  return { channel, subscribed, thread }
}

let seq = 0
const names = [
  ["a plain name", () => `redisson:${process.pid}:${++seq}`],
  ["a hash-tagged name", () => `{tenant-${process.pid}-${++seq}}:orders`]
] as const

describe.skipIf(skipCluster())("Redisson 4.7 in cluster mode", () => {
  let cluster: RedisCluster
  beforeAll(async () => {
    cluster = await startRedisCluster()
  }, 60_000)
  afterAll(() => cluster?.stop())

  const provide = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
    Effect.provide(effect, Layer.unwrapEffect(Effect.sync(() => clusterBackend(cluster))))

  for (const [label, nameOf] of names) {
    it.scopedLive(`Redisson's SPUBLISH wakes our waiter, ours wakes Redisson's; each excludes the other (${label})`, () =>
      Effect.gen(function*() {
        const name = nameOf()
        const admin = yield* clusterAdmin(cluster)
        const java = redissonClient(admin, name)
        yield* java.subscribed
        const t1 = java.thread(1)

        // Redisson holds (and renews with its watchdog script): we wait, and its unlock wakes us.
        assert.isNull(yield* t1.tryLock)
        assert.deepStrictEqual(yield* t1.renew, [1])
        const waiter = yield* Effect.fork(
          Effect.timed(withLock(name, (lease) => Effect.succeed(lease.fencingToken), {
            retry: Schedule.spaced("1 minute"),
            wait: "1 minute"
          }))
        )
        yield* Effect.sleep(300)
        assert.isTrue(Option.isNone(yield* Fiber.poll(waiter)), "excluded while Redisson holds")
        assert.strictEqual(yield* t1.unlock, 1)
        const [waited, token] = yield* Fiber.join(waiter)
        assert.isTrue(token > 0n)
        assert.isBelow(Duration.toMillis(waited), 15_000, "woken by Redisson's SPUBLISH, not the one-minute retry")

        // We hold: Redisson's tryLock sees the PTTL, its renewal does not touch our hold, and our
        // release (SPUBLISH, since Redisson's subscriber is counted) wakes Redisson's lock().
        const entered = yield* Deferred.make<void>()
        const release = yield* Deferred.make<void>()
        const holder = yield* Effect.fork(
          withLock(name, (lease) =>
            Effect.gen(function*() {
              yield* Deferred.succeed(entered, void 0)
              yield* Deferred.await(release)
              return lease.owner
            }), { lease: "1 minute" })
        )
        yield* Deferred.await(entered)
        const pttl = yield* t1.tryLock
        assert.isNumber(pttl)
        assert.isAbove(pttl!, redissonLease, "our one-minute lease, untouched by Redisson")
        assert.deepStrictEqual(yield* t1.renew, [0])
        const javaWaiter = yield* Effect.fork(Effect.timed(t1.lock))
        yield* Effect.sleep(300)
        assert.isTrue(Option.isNone(yield* Fiber.poll(javaWaiter)), "Redisson waits while we hold")
        yield* Deferred.succeed(release, void 0)
        const owner = yield* Fiber.join(holder)
        const [javaWaited, waits] = yield* Fiber.join(javaWaiter)
        assert.isAtLeast(waits, 1)
        assert.isBelow(Duration.toMillis(javaWaited), 15_000, "woken by our SPUBLISH, not the minute-long PTTL")
        const hash = yield* Effect.promise(() => admin.hgetall(name))
        assert.deepStrictEqual(hash, { [t1.lockName]: "1" }, `Redisson holds now, not ${owner}`)
        assert.strictEqual(yield* t1.unlock, 1)
        assert.strictEqual(yield* Effect.promise(() => admin.exists(name)), 0)
      }).pipe(provide))
  }

  it.scopedLive(
    "three Redisson threads and three effect-lock fibers increment one counter: exact, no overlap",
    () =>
      Effect.gen(function*() {
        const name = `{mixed-${process.pid}}:counter-lock`
        const counter = `{mixed-${process.pid}}:counter`
        const rounds = 8
        const admin = yield* clusterAdmin(cluster)
        const java = redissonClient(admin, name)
        yield* java.subscribed
        const intervals: Array<{ readonly who: string; readonly start: bigint; readonly end: bigint }> = []
        const increment = (who: string) =>
          Effect.gen(function*() {
            const start = process.hrtime.bigint()
            const read = Number((yield* Effect.promise(() => admin.get(counter))) ?? "0")
            yield* Effect.sleep(3)
            yield* Effect.promise(() => admin.set(counter, String(read + 1)))
            intervals.push({ who, start, end: process.hrtime.bigint() })
          })
        const javaThread = (id: number) =>
          Effect.gen(function*() {
            const t = java.thread(id)
            for (let i = 0; i < rounds; i++) {
              yield* t.lock
              yield* increment(`redisson:${id}`)
              assert.strictEqual(yield* t.unlock, 1)
            }
          })
        const ours = (id: number) =>
          Effect.repeatN(
            withLock(name, increment(`effect-lock:${id}`), { retry: Schedule.spaced("1 minute"), wait: "1 minute" }),
            rounds - 1
          )
        const [elapsed] = yield* Effect.timed(
          Effect.all([1, 2, 3].flatMap((id) => [javaThread(id), ours(id)]), { concurrency: "unbounded", discard: true })
        )
        assert.strictEqual(yield* Effect.promise(() => admin.get(counter)), String(6 * rounds), "no lost update")
        const sorted = [...intervals].sort((a, b) => (a.start < b.start ? -1 : 1))
        for (let i = 1; i < sorted.length; i++) {
          assert.isTrue(sorted[i]!.start > sorted[i - 1]!.end, `${sorted[i]!.who} overlaps ${sorted[i - 1]!.who}`)
        }
        const crossings = sorted.filter((s, i) => i > 0 && s.who.split(":")[0] !== sorted[i - 1]!.who.split(":")[0])
        // Both kinds of client contended (how often the lock changed sides depends on scheduling).
        assert.isAtLeast(crossings.length, 1, "the lock passed between Redisson and effect-lock")
        // Every hand-over between the two was woken by a message: one missed wake-up costs a
        // 30 s lease (Redisson) or a one-minute retry (ours).
        assert.isBelow(Duration.toMillis(elapsed), 25_000)
      }).pipe(provide),
    60_000
  )
})
