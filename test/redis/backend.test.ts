/**
 * The Redis backend on real redis-server processes: key layout, scripts, connections and
 * failure behaviour. Policy behaviour (waiting, watchdog, ...) is the conformance suite's.
 */
import { afterAll, assert, beforeAll, describe, it } from "@effect/vitest"
import { ConfigProvider, Duration, Effect, Exit, Fiber, Layer, Option, Redacted, Schedule } from "effect"
import { Redis } from "ioredis"
import { vi } from "vitest"
import type { LockBackendShape, ReleaseResult } from "../../src/index.js"
import { LockBackend, withLock } from "../../src/index.js"
import * as lockScripts from "../../src/internal/redis/lockScripts.js"
import * as RedisBackend from "../../src/RedisBackend.js"
import type { RedisServer } from "../support/redisServer.js"
import { redisServer, skipRedis, startRedisServer } from "../support/redisServer.js"
import { admin, captureLogs, clientConnections, cmd, eventually, listen } from "./helpers.js"

const skip = skipRedis()
const skipOwn = skip || skipRedis(true)

let seq = 0
const freshKey = (label: string) => `backend:${label}:${process.pid}:${++seq}`

const request = (key: string, owner: string, leaseMillis = 10_000, fencing = true) => ({
  key,
  owner,
  leaseMillis,
  fencing
})

/** Script calls (`EVALSHA`) the server has run so far. */
const scriptCalls = (redis: Redis) =>
  Effect.map(cmd<string>(redis, "INFO", "commandstats"), (info) => {
    const match = /^cmdstat_evalsha:calls=(\d+)/m.exec(info)
    return match === null ? 0 : Number(match[1])
  })

const released: ReleaseResult = { _tag: "Released" }
const stillHeld: ReleaseResult = { _tag: "StillHeld" }
const notHeld: ReleaseResult = { _tag: "NotHeld" }

const acquired = (backend: LockBackendShape, key: string, owner: string, leaseMillis = 10_000) =>
  Effect.flatMap(
    backend.primitives.tryAcquire(request(key, owner, leaseMillis)),
    (result) => result._tag === "Acquired" ? Effect.succeed(result.fencingToken) : Effect.dieMessage(`${key} was busy`)
  )

describe.skipIf(skip)("RedisBackend on a shared test server", () => {
  let server: RedisServer
  beforeAll(async () => {
    server = await startRedisServer()
  })
  afterAll(() => server?.stop())

  const backend = (options: Omit<RedisBackend.RedisBackendOptions, "url"> = {}) =>
    RedisBackend.make({ url: server.url, ...options })

  it.scopedLive("keeps Redisson's layout: hash + lease, token counter, release channel", () =>
    Effect.gen(function*() {
      const key = freshKey("layout")
      const lock = `app:${key}`
      const redis = yield* admin(server.url)
      const b = yield* backend({ prefix: "app:" })
      const messages = yield* listen(server.url, `redisson_lock__channel:{${lock}}`)

      const token = yield* acquired(b, key, "uuid-1:7", 10_000)
      assert.strictEqual(token, 1n)
      assert.deepStrictEqual(yield* cmd(redis, "HGETALL", lock), ["uuid-1:7", "1"])
      const pttl = yield* cmd<number>(redis, "PTTL", lock)
      assert.isTrue(pttl > 0 && pttl <= 10_000, `lease set with PEXPIRE (${pttl})`)
      assert.strictEqual(yield* cmd(redis, "GET", `redisson_lock_token:{${lock}}`), "1")
      assert.strictEqual(yield* cmd(redis, "EXISTS", key), 0, "nothing outside the prefix")

      assert.deepStrictEqual(yield* b.primitives.release(key, "uuid-1:7"), released)
      assert.strictEqual(yield* cmd(redis, "EXISTS", lock), 0)
      yield* eventually(Effect.sync(() => messages.length > 0), 5_000, "the release message")
      assert.deepStrictEqual(messages, ["0"])
      assert.strictEqual(yield* cmd(redis, "PTTL", `redisson_lock_token:{${lock}}`), -1, "the counter never expires")
    }))

  it.scopedLive("prefixes keep backends on one server apart", () =>
    Effect.gen(function*() {
      const key = freshKey("prefix")
      const a = yield* backend({ prefix: "a:" })
      const b = yield* backend({ prefix: "b:" })
      assert.strictEqual(yield* acquired(a, key, "x:1"), 1n)
      assert.strictEqual(yield* acquired(b, key, "y:1"), 1n, "a separate lock with its own counter")
      const busy = yield* a.primitives.tryAcquire(request(key, "y:1"))
      assert.strictEqual(busy._tag, "Busy")
      assert.deepStrictEqual(
        Option.map(yield* b.primitives.inspect(key), (info) => info.holders),
        Option.some([{ owner: "y:1", holdCount: 1 }])
      )
    }))

  it.scopedLive("busy reports the holder's PTTL, or undefined when the lock has no expiry", () =>
    Effect.gen(function*() {
      const key = freshKey("busy")
      const redis = yield* admin(server.url)
      const b = yield* backend()
      yield* acquired(b, key, "holder:1", 5_000)
      const busy = yield* b.primitives.tryAcquire(request(key, "other:1"))
      assert.strictEqual(busy._tag, "Busy")
      if (busy._tag === "Busy") assert.isTrue(busy.ttlMillis! > 0 && busy.ttlMillis! <= 5_000)
      yield* cmd(redis, "PERSIST", key)
      assert.deepStrictEqual(yield* b.primitives.tryAcquire(request(key, "other:1")), {
        _tag: "Busy",
        ttlMillis: undefined
      })
      const info = yield* b.primitives.inspect(key)
      assert.deepStrictEqual(
        info,
        Option.some({ key, holders: [{ owner: "holder:1", holdCount: 1 }], ttlMillis: undefined })
      )
      assert.isTrue(Option.isNone(yield* b.primitives.inspect(freshKey("none"))))
    }))

  it.scopedLive("renew is owner-checked and tells a stolen lock from an expired one", () =>
    Effect.gen(function*() {
      const key = freshKey("renew")
      const redis = yield* admin(server.url)
      const b = yield* backend()
      yield* acquired(b, key, "me:1", 1_000)
      assert.deepStrictEqual(yield* b.primitives.renew([request(key, "me:1", 60_000)]), [{ _tag: "Renewed" }])
      assert.isTrue((yield* cmd<number>(redis, "PTTL", key)) > 1_000, "lease extended")
      assert.deepStrictEqual(yield* b.primitives.renew([request(key, "thief:1")]), [{ _tag: "Lost", reason: "stolen" }])
      assert.isTrue((yield* cmd<number>(redis, "PTTL", key)) > 1_000, "a failed renewal changes nothing")
      yield* cmd(redis, "DEL", key)
      assert.deepStrictEqual(yield* b.primitives.renew([request(key, "me:1")]), [{ _tag: "Lost", reason: "expired" }])
      assert.strictEqual(yield* cmd(redis, "EXISTS", key), 0, "renewing never creates a lock")
    }))

  it.scopedLive("renew takes many locks in one script call: one outcome per request, in order", () =>
    Effect.gen(function*() {
      const redis = yield* admin(server.url)
      const b = yield* backend()
      const [mine, theirs, gone] = [freshKey("batch-mine"), freshKey("batch-theirs"), freshKey("batch-gone")]
      yield* acquired(b, mine, "me:1", 1_000)
      yield* acquired(b, theirs, "them:1", 1_000)
      const before = yield* scriptCalls(redis)
      const outcomes = yield* b.primitives.renew([
        request(mine, "me:1", 60_000),
        request(theirs, "me:1", 60_000),
        request(gone, "me:1", 60_000)
      ])
      assert.strictEqual((yield* scriptCalls(redis)) - before, 1, "one round trip for the whole batch")
      assert.deepStrictEqual(outcomes, [
        { _tag: "Renewed" },
        { _tag: "Lost", reason: "stolen" },
        { _tag: "Lost", reason: "expired" }
      ])
      assert.isAbove(yield* cmd<number>(redis, "PTTL", mine), 1_000, "the held one was extended")
      assert.isAtMost(yield* cmd<number>(redis, "PTTL", theirs), 1_000, "another owner's lease is untouched")
      assert.strictEqual(yield* cmd(redis, "EXISTS", gone), 0, "renewing never creates a lock")
      assert.deepStrictEqual(yield* b.primitives.renew([]), [])
    }))

  it.scopedLive("a lease that is not a whole number of ms in [1, 2^31-1] is refused by the scripts before any write", () =>
    Effect.gen(function*() {
      const redis = yield* admin(server.url)
      const b = yield* backend()
      for (const leaseMillis of [0, -5, 1.5, 2 ** 31, Number.NaN]) {
        const label = String(leaseMillis)
        const fresh = freshKey("badlease")
        const acquireError = yield* Effect.flip(b.primitives.tryAcquire(request(fresh, "me:1", leaseMillis)))
        assert.strictEqual(acquireError.operation, "acquire", label)
        assert.include(acquireError.message, "whole number of milliseconds", label)
        assert.strictEqual(yield* cmd(redis, "EXISTS", fresh), 0, `acquire wrote no lock (${label})`)
        assert.strictEqual(yield* cmd(redis, "EXISTS", `redisson_lock_token:{${fresh}}`), 0, `nor a token (${label})`)

        // A bad lease anywhere in a renewal batch: the script refuses it before renewing the good ones.
        const held = freshKey("badlease-held")
        yield* acquired(b, held, "me:1", 1_000)
        const renewError = yield* Effect.flip(
          b.primitives.renew([request(held, "me:1", 60_000), request(held, "me:1", leaseMillis)])
        )
        assert.strictEqual(renewError.operation, "renew", label)
        assert.include(renewError.message, "whole number of milliseconds", label)
        assert.isAtMost(
          yield* cmd<number>(redis, "PTTL", held),
          1_000,
          `the good renewal before it was not applied (${label})`
        )

        // A hand-over with a bad lease for the receiver leaves the giver's hold as it was.
        const handOverError = yield* Effect.flip(
          b.primitives.handOver!(held, "me:1", request(held, "next:1", leaseMillis))
        )
        assert.include(handOverError.message, "whole number of milliseconds", label)
        assert.deepStrictEqual(
          Option.map(yield* b.primitives.inspect(held), (info) => info.holders),
          Option.some([{ owner: "me:1", holdCount: 1 }]),
          `the hand-over changed nothing (${label})`
        )
      }
    }))

  it.scopedLive("release is owner-checked and idempotent, and publishes once", () =>
    Effect.gen(function*() {
      const key = freshKey("release")
      const b = yield* backend()
      const messages = yield* listen(server.url, `redisson_lock__channel:{${key}}`)
      yield* acquired(b, key, "me:1")
      assert.deepStrictEqual(yield* b.primitives.release(key, "other:1"), notHeld)
      assert.isTrue(Option.isSome(yield* b.primitives.inspect(key)), "another owner's release leaves the lock")
      assert.deepStrictEqual(yield* b.primitives.release(key, "me:1"), released)
      assert.deepStrictEqual(yield* b.primitives.release(key, "me:1"), notHeld)
      assert.isTrue(Option.isNone(yield* b.primitives.inspect(key)))
      yield* Effect.sleep(100)
      assert.deepStrictEqual(messages, ["0"])
    }))

  it.scopedLive("hold counts follow Redisson: the same owner twice needs two releases", () =>
    Effect.gen(function*() {
      const key = freshKey("holds")
      const b = yield* backend()
      const first = yield* acquired(b, key, "me:1")
      const second = yield* acquired(b, key, "me:1")
      assert.strictEqual(second, first, "a re-entry draws no new token")
      assert.deepStrictEqual(
        Option.map(yield* b.primitives.inspect(key), (i) => i.holders),
        Option.some([{ owner: "me:1", holdCount: 2 }])
      )
      assert.deepStrictEqual(yield* b.primitives.release(key, "me:1"), stillHeld)
      assert.isTrue(Option.isSome(yield* b.primitives.inspect(key)), "still held once")
      assert.deepStrictEqual(yield* b.primitives.release(key, "me:1"), released)
      assert.isTrue(Option.isNone(yield* b.primitives.inspect(key)))
    }))

  it.scopedLive("force release deletes any holder and notifies", () =>
    Effect.gen(function*() {
      const key = freshKey("force")
      const b = yield* backend()
      const messages = yield* listen(server.url, `redisson_lock__channel:{${key}}`)
      yield* acquired(b, key, "someone:1")
      assert.isTrue(yield* b.primitives.forceRelease(key))
      assert.isFalse(yield* b.primitives.forceRelease(key))
      yield* eventually(Effect.sync(() => messages.length > 0), 5_000, "the release message")
      yield* Effect.sleep(50)
      assert.deepStrictEqual(messages, ["0"])
    }))

  it.scopedLive("fencing tokens survive the lock's expiry, keep increasing and keep 64 bits", () =>
    Effect.gen(function*() {
      const key = freshKey("tokens")
      const redis = yield* admin(server.url)
      const b = yield* backend()
      const t1 = yield* acquired(b, key, "a:1", 50)
      yield* eventually(Effect.map(cmd<number>(redis, "EXISTS", key), (n) => n === 0), 5_000, "expiry")
      const t2 = yield* acquired(b, key, "b:1", 50)
      assert.isTrue(t2 > t1)
      yield* b.primitives.release(key, "b:1")
      yield* cmd(redis, "SET", `redisson_lock_token:{${key}}`, "9007199254740993")
      assert.strictEqual(yield* acquired(b, key, "c:1"), 9007199254740994n)
      yield* b.primitives.release(key, "c:1")
      const unfenced = yield* b.primitives.tryAcquire(request(key, "d:1", 10_000, false))
      assert.deepStrictEqual(unfenced, { _tag: "Acquired", fencingToken: 0n })
      assert.strictEqual(yield* cmd(redis, "GET", `redisson_lock_token:{${key}}`), "9007199254740994")
    }))

  // Changes server-wide state: not on a shared REDIS_URL server.
  it.scopedLive.skipIf(skipOwn)("NOSCRIPT: after SCRIPT FLUSH every script still runs", () =>
    Effect.gen(function*() {
      const key = freshKey("noscript")
      const redis = yield* admin(server.url)
      const b = yield* backend()
      const scripts = lockScripts
      yield* cmd(redis, "SCRIPT", "FLUSH")
      assert.deepStrictEqual(yield* cmd(redis, "SCRIPT", "EXISTS", scripts.acquire.sha), [0])
      assert.strictEqual(yield* acquired(b, key, "me:1"), 1n)
      assert.deepStrictEqual(yield* b.primitives.renew([request(key, "me:1")]), [{ _tag: "Renewed" }])
      assert.isTrue(Option.isSome(yield* b.primitives.inspect(key)))
      assert.deepStrictEqual(yield* b.primitives.release(key, "me:1"), released)
      assert.isFalse(yield* b.primitives.forceRelease(key))
      assert.deepStrictEqual(
        yield* cmd(redis, "SCRIPT", "EXISTS", scripts.acquire.sha, scripts.release.sha),
        [1, 1],
        "the EVAL fallback cached the scripts again"
      )
    }))

  it.scopedLive("an existing client is used for commands and left open", () =>
    Effect.gen(function*() {
      const key = freshKey("client")
      const client = yield* admin(server.url)
      const token = yield* Effect.scoped(Effect.gen(function*() {
        const b = yield* RedisBackend.make({ client })
        const token = yield* acquired(b, key, "me:1")
        yield* b.primitives.release(key, "me:1")
        return token
      }))
      assert.strictEqual(token, 1n)
      assert.strictEqual(client.status, "ready")
      assert.strictEqual(yield* cmd(client, "PING"), "PONG")
    }))

  it.scopedLive("a command timeout that is not a finite positive whole number of ms fails the layer with LockOptionsError", () =>
    Effect.gen(function*() {
      for (const commandTimeout of [0, -1, Duration.infinity, Number.NaN, 1.5]) {
        const error = yield* Effect.flip(Effect.scoped(backend({ commandTimeout })))
        assert.strictEqual(error._tag, "LockOptionsError", String(commandTimeout))
        if (error._tag === "LockOptionsError") assert.strictEqual(error.field, "commandTimeout", String(commandTimeout))
      }
    }))

  // Changes server-wide state: not on a shared REDIS_URL server.
  it.scopedLive.skipIf(skipOwn)(
    "a least-privilege ACL user can do everything the backend needs",
    () =>
      Effect.gen(function*() {
        const redis = yield* admin(server.url)
        yield* cmd(redis, "ACL", "LOG", "RESET")
        yield* cmd(
          redis,
          "ACL",
          "SETUSER",
          "locks",
          "reset",
          "on",
          ">lockpw",
          ...RedisBackend.aclRule({ prefix: "locks:" })
        )
        const url = Redacted.make(`redis://locks:lockpw@127.0.0.1:${server.port}`)
        const layer = RedisBackend.layer({ url, prefix: "locks:" })
        const key = freshKey("acl")
        // Contended: the waiter is woken by the holder's release (pub/sub), not by the lease.
        const [millis, token] = yield* Effect.gen(function*() {
          const holder = yield* Effect.fork(withLock(key, Effect.sleep(200), { lease: "30 seconds" }))
          yield* Effect.sleep(50)
          const waited = yield* Effect.timed(
            withLock(key, (lease) => Effect.succeed(lease.fencingToken), { retry: Schedule.spaced("60 seconds") })
          )
          yield* Fiber.join(holder)
          const backend = yield* LockBackend
          yield* backend.primitives.forceRelease(key)
          return [Duration.toMillis(waited[0]), waited[1]] as const
        }).pipe(Effect.provide(layer))
        assert.strictEqual(token, 2n)
        assert.isBelow(millis, 10_000, "woken by the release long before the 30 s lease")
        assert.deepStrictEqual(yield* cmd(redis, "ACL", "LOG"), [], "no command was refused")
      })
  )

  // Changes server-wide state: not on a shared REDIS_URL server.
  it.scopedLive.skipIf(skipOwn)(
    "channels revoked while running: the refused SUBSCRIBE is logged and waiters still get in (at the holder's lease end)",
    () =>
      Effect.gen(function*() {
        const redis = yield* admin(server.url)
        yield* cmd(
          redis,
          "ACL",
          "SETUSER",
          "nopubsub",
          "reset",
          "on",
          ">pw",
          ...RedisBackend.aclRule({ prefix: "np:" })
        )
        const layer = RedisBackend.layer({ url: `redis://nopubsub:pw@127.0.0.1:${server.port}`, prefix: "np:" })
        const key = freshKey("nosub")
        const [millis, logs] = yield* captureLogs((logs) =>
          Effect.gen(function*() {
            const backend = yield* LockBackend
            // Channels revoked once the backend runs (a user without them is refused at startup).
            yield* cmd(redis, "ACL", "SETUSER", "nopubsub", "resetchannels")
            yield* acquired(backend, key, "foreign:1", 300)
            const [waited] = yield* Effect.timed(withLock(key, Effect.void, { retry: Schedule.spaced("60 seconds") }))
            return [Duration.toMillis(waited), logs] as const
          }).pipe(Effect.provide(layer))
        )
        assert.isBelow(millis, 10_000)
        assert.isTrue(
          logs.some((line) => line.includes("SUBSCRIBE failed") && line.includes("NOPERM")),
          logs.join("\n")
        )
      })
  )

  // Changes server-wide state: not on a shared REDIS_URL server.
  it.scopedLive.skipIf(skipOwn)(
    "PUBSUB NUMSUB revoked while running (the hand-over script is refused): releases notify instead, with one warning",
    () =>
      Effect.gen(function*() {
        const redis = yield* admin(server.url)
        yield* cmd(
          redis,
          "ACL",
          "SETUSER",
          "nonumsub",
          "reset",
          "on",
          ">pw",
          ...RedisBackend.aclRule({ prefix: "nn:" })
        )
        const layer = RedisBackend.layer({ url: `redis://nonumsub:pw@127.0.0.1:${server.port}`, prefix: "nn:" })
        const key = freshKey("nonumsub")
        const [tokens, logs] = yield* captureLogs((logs) =>
          Effect.gen(function*() {
            // PUBSUB NUMSUB revoked once the backend runs (a user without it is refused at startup).
            yield* LockBackend
            yield* cmd(redis, "ACL", "SETUSER", "nonumsub", "-pubsub|numsub")
            // Three rounds of a release with a parked waiter: the first is refused and falls back.
            const tokens: Array<bigint> = []
            for (let round = 0; round < 3; round++) {
              const holder = yield* Effect.fork(
                withLock(key, (lease) => Effect.as(Effect.sleep(300), lease.fencingToken))
              )
              yield* Effect.sleep(30)
              const waiter = yield* Effect.fork(
                withLock(key, (lease) => Effect.succeed(lease.fencingToken), { retry: Schedule.spaced("60 seconds") })
              )
              tokens.push(
                yield* Fiber.join(holder),
                yield* Fiber.join(waiter).pipe(Effect.timeoutFail({
                  duration: "10 seconds",
                  onTimeout: () => new Error("the waiter was not woken by the release")
                }))
              )
            }
            const backend = yield* LockBackend
            assert.isTrue(Option.isNone(yield* backend.primitives.inspect(key)), "no lock left")
            return [tokens, logs] as const
          }).pipe(Effect.provide(layer))
        )
        assert.deepStrictEqual(tokens, [1n, 2n, 3n, 4n, 5n, 6n])
        const warnings = logs.filter((line) => line.includes("refused the hand-over script"))
        assert.strictEqual(warnings.length, 1, logs.join("\n"))
        assert.isTrue(warnings[0]!.includes("can't run this command"), warnings[0])
      })
  )
})

describe.skipIf(skipOwn)("RedisBackend on a server of its own", () => {
  it.scopedLive("uses two connections and closes both with its scope", () =>
    Effect.gen(function*() {
      const server = yield* redisServer()
      const redis = yield* admin(server.url)
      yield* Effect.scoped(Effect.gen(function*() {
        yield* RedisBackend.make({ url: server.url })
        const clients = yield* clientConnections(redis)
        assert.strictEqual(clients.length, 2, clients.join("\n"))
      }))
      yield* eventually(
        Effect.map(clientConnections(redis), (clients) => clients.length === 0),
        5_000,
        "no connection left"
      )
    }))

  it.scopedLive("an existing client stays open; the subscriber duplicate is closed", () =>
    Effect.gen(function*() {
      const server = yield* redisServer()
      const redis = yield* admin(server.url)
      const client = new Redis(server.url, { connectionName: "user-client" })
      yield* Effect.addFinalizer(() => Effect.sync(() => client.disconnect()))
      yield* Effect.scoped(RedisBackend.make({ client }))
      yield* eventually(
        Effect.map(clientConnections(redis), (clients) =>
          clients.length === 1 && clients[0]!.includes("name=user-client")),
        5_000,
        "only the user's client left"
      )
    }))

  it.scopedLive("layerConfig reads REDIS_URL; the password reaches neither logs nor errors", () =>
    Effect.gen(function*() {
      const password = "s3cret-pa55word"
      const server = yield* redisServer({ args: ["--requirepass", password] })
      const withUrl = (url: string) =>
        Layer.provide(
          RedisBackend.layerConfig(),
          Layer.setConfigProvider(ConfigProvider.fromMap(new Map([["REDIS_URL", url]])))
        )
      const good = withUrl(`redis://:${password}@127.0.0.1:${server.port}`)
      const bad = withUrl(`redis://:${password}-wrong@127.0.0.1:${server.port}`)
      const [token, failure, logs] = yield* captureLogs((logs) =>
        Effect.gen(function*() {
          const token = yield* withLock("config", (lease) => Effect.succeed(lease.fencingToken)).pipe(
            Effect.provide(good)
          )
          const failure = yield* Effect.flip(withLock("config", Effect.void).pipe(Effect.provide(bad)))
          // Errors while connected are logged too: stop the server under a live backend.
          yield* Effect.gen(function*() {
            yield* LockBackend
            yield* Effect.promise(() => server.stop())
            yield* eventually(Effect.sync(() => logs.some((line) => line.includes("connection error"))), 5_000, "a log")
          }).pipe(Effect.provide(good))
          return [token, failure, logs] as const
        })
      )
      assert.strictEqual(token, 1n)
      assert.strictEqual(failure._tag, "LockBackendError")
      if (failure._tag === "LockBackendError") assert.strictEqual(failure.operation, "connect")
      const text = [String(failure), failure.message, JSON.stringify(failure), ...logs].join("\n")
      assert.include(text, "WRONGPASS")
      assert.notInclude(text, password)
      const missing = yield* Effect.flip(
        Layer.build(RedisBackend.layerConfig()).pipe(
          Effect.withConfigProvider(ConfigProvider.fromMap(new Map())),
          Effect.scoped
        )
      )
      assert.strictEqual(missing._tag, "ConfigError" as string)
    }))

  it.scopedLive("connection errors are logged, never unhandled", () =>
    Effect.gen(function*() {
      const server = yield* redisServer()
      const consoleError = vi.spyOn(console, "error")
      yield* Effect.addFinalizer(() => Effect.sync(() => consoleError.mockRestore()))
      const logs = yield* captureLogs((logs) =>
        Effect.scoped(Effect.gen(function*() {
          yield* RedisBackend.make({ url: server.url })
          server.kill("SIGKILL")
          // ioredis reports the drop and then every failed reconnect attempt.
          yield* eventually(
            Effect.sync(() => logs.filter((line) => line.includes("connection error")).length >= 2),
            10_000,
            "connection error logs"
          )
          return logs
        }))
      )
      assert.isTrue(logs.some((line) => line.includes("level=WARN") && line.includes("connection=command")))
      assert.isTrue(logs.some((line) => line.includes("connection=subscriber")))
      const unhandled = consoleError.mock.calls.filter((args) => String(args[0]).includes("Unhandled error event"))
      assert.deepStrictEqual(unhandled, [])
    }))

  it.scopedLive("no offline replay: an acquire while Redis is down fails within the command timeout and never runs later", () =>
    Effect.gen(function*() {
      const server = yield* redisServer()
      const b = yield* RedisBackend.make({ url: server.url, commandTimeout: "500 millis" })
      yield* Effect.promise(() => server.stop())
      const exit = yield* Effect.exit(
        b.primitives.tryAcquire(request("offline", "me:1", 60_000)).pipe(
          Effect.timeoutFail({ duration: "5 seconds", onTimeout: () => "hung waiting for a reconnect" as const })
        )
      )
      assert.isTrue(Exit.isFailure(exit))
      const failure = Exit.isFailure(exit) && exit.cause._tag === "Fail" ? exit.cause.error : undefined
      assert.strictEqual(typeof failure === "object" ? failure._tag : failure, "LockBackendError")
      yield* Effect.promise(() => server.restart())
      yield* eventually(Effect.isSuccess(b.primitives.inspect("probe")), 10_000, "the backend to reconnect")
      const redis = yield* admin(server.url)
      yield* Effect.sleep(200)
      assert.deepStrictEqual(yield* cmd(redis, "KEYS", "*"), [], "the failed acquire was not replayed")
    }))

  it.scopedLive("an acquire that timed out is compensated: no orphan lock once Redis answers again", () =>
    Effect.gen(function*() {
      const server = yield* redisServer()
      const b = yield* RedisBackend.make({ url: server.url, commandTimeout: "300 millis" })
      server.pause()
      const error = yield* Effect.flip(b.primitives.tryAcquire(request("paused", "me:1", 60_000)))
      assert.strictEqual(error._tag, "LockBackendError")
      assert.include(error.message, "timed out")
      server.resume()
      const redis = yield* admin(server.url)
      yield* eventually(
        Effect.map(cmd(redis, "GET", "redisson_lock_token:{paused}"), (t) => t === "1"),
        5_000,
        "the acquire ran"
      )
      assert.strictEqual(yield* cmd(redis, "EXISTS", "paused"), 0, "and its lock was released")
    }))

  it.scopedLive("an external client without a command timeout gets the backend's, and its lost acquire is compensated", () =>
    Effect.gen(function*() {
      const server = yield* redisServer()
      const client = yield* admin(server.url) // ioredis defaults: no commandTimeout, offline queue on
      const b = yield* RedisBackend.make({ client, commandTimeout: "300 millis" })
      server.pause()
      const error = yield* Effect.flip(b.primitives.tryAcquire(request("external", "me:1", 60_000)))
      assert.strictEqual(error._tag, "LockBackendError")
      assert.include(error.message, "timed out")
      server.resume()
      const redis = yield* admin(server.url)
      yield* eventually(
        Effect.map(cmd(redis, "GET", "redisson_lock_token:{external}"), (t) => t === "1"),
        5_000,
        "the acquire ran"
      )
      yield* eventually(Effect.map(cmd(redis, "EXISTS", "external"), (n) => n === 0), 5_000, "the lock released")
    }))

  it.scopedLive("an acquire whose caller was interrupted in flight is compensated", () =>
    Effect.gen(function*() {
      const server = yield* redisServer()
      const b = yield* RedisBackend.make({ url: server.url, commandTimeout: "20 seconds" })
      server.pause()
      const fiber = yield* Effect.fork(b.primitives.tryAcquire(request("interrupted", "me:1", 60_000)))
      yield* Effect.sleep(100)
      yield* Fiber.interrupt(fiber)
      server.resume()
      const redis = yield* admin(server.url)
      yield* eventually(
        Effect.map(cmd(redis, "GET", "redisson_lock_token:{interrupted}"), (t) => t === "1"),
        5_000,
        "the acquire ran"
      )
      yield* eventually(Effect.map(cmd(redis, "EXISTS", "interrupted"), (n) => n === 0), 5_000, "the lock released")
    }))

  it.scopedLive("after the subscriber connection drops, it resubscribes and releases wake waiters again", () =>
    Effect.gen(function*() {
      const server = yield* redisServer()
      const redis = yield* admin(server.url)
      const b = yield* RedisBackend.make({ url: server.url })
      const channel = "redisson_lock__channel:{resub}"
      const numsub = Effect.map(cmd<Array<string | number>>(redis, "PUBSUB", "NUMSUB", channel), (r) => Number(r[1]))
      yield* acquired(b, "resub", "foreign:1", 30_000)
      const waiter = yield* Effect.fork(
        Effect.timed(withLock("resub", Effect.void, { retry: Schedule.spaced("60 seconds") })).pipe(
          Effect.provideService(LockBackend, b)
        )
      )
      yield* eventually(Effect.map(numsub, (n) => n === 1), 5_000, "the subscription")
      assert.strictEqual(yield* cmd(redis, "CLIENT", "KILL", "TYPE", "pubsub"), 1)
      yield* eventually(Effect.map(numsub, (n) => n === 1), 10_000, "the resubscription")
      yield* b.primitives.release("resub", "foreign:1")
      const [waited] = yield* Fiber.join(waiter)
      assert.isBelow(Duration.toMillis(waited), 10_000, "woken by the release, not the 30 s lease")
    }))
})
