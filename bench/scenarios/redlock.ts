/**
 * o. Redlock: one lock over 3 and over 5 independent redis-servers (no replication between them),
 * started by the bench on free loopback ports for this scenario. effect-lock's `RedlockBackend`
 * next to the two Redlock implementations people would otherwise pick, on the same servers:
 *
 * - effect-lock: `withLock(key, body)` on `RedlockBackend.layer({ nodes })`, defaults (every call
 *   goes to every node at once and is decided as soon as a quorum answered);
 * - redlock 5: `new Redlock(clients, { retryCount: -1 })`, `redlock.using([key], 30000, routine)`;
 * - redis-semaphore: `new RedlockMutex(clients, key)`, `acquire()` / `release()`, defaults.
 *
 * For each cluster size: the serial loop of scenario a (p50 and CPU per operation) and the 64
 * fibers on distinct keys of scenario b (operations per second), in rounds that take turns between
 * the libraries, as those scenarios do. Every library gets fresh clients and flushed servers.
 */
import { Context, Effect, Layer } from "effect"
import type { Scope } from "effect"
import { Redis } from "ioredis"
import { RedlockMutex } from "redis-semaphore"
import type * as EffectLock from "../../src/index.js"
import type * as EffectLockRedlockBackend from "../../src/RedlockBackend.js"
import type { RedisServer } from "../../test/support/redisServer.js"
import { startRedisServer } from "../../test/support/redisServer.js"
import type { LockClient } from "../peers.js"
import {
  abandonable,
  LockFailure,
  makeStragglers,
  plainClient,
  redisSemaphoreClient,
  Redlock,
  versionOf
} from "../peers.js"
import type { Failed, Outcome } from "../results.js"
import { isFailed } from "../results.js"
import type { BenchContext } from "./common.js"
import { window } from "./common.js"
import type { DistinctResult, DistinctRound } from "./distinct.js"
import { combineDistinct, concurrentLoops, DISTINCT_ROUNDS, FIBERS } from "./distinct.js"
import type { SerialResult, SerialRound } from "./serial.js"
import { combineSerial, SERIAL_ROUNDS, timeLoop } from "./serial.js"

// From the build, as in peers.ts (a variable path: type-checking needs no build).
const effectLockBuild = "../../dist/index.js"
const effectLockRedlockBuild = "../../dist/RedlockBackend.js"
const { LockBackend, withLock } = (await import(effectLockBuild)) as typeof EffectLock
const RedlockBackend = (await import(effectLockRedlockBuild)) as typeof EffectLockRedlockBackend

/** A Redlock implementation, opened on the URLs of the cluster's nodes. */
export interface RedlockPeer {
  readonly name: string
  readonly version: string
  readonly usage: string
  readonly open: (urls: ReadonlyArray<string>) => Effect.Effect<LockClient, LockFailure, Scope.Scope>
}

export interface RedlockResult {
  readonly library: string
  readonly nodes: number
  readonly serial: SerialResult
  readonly distinct: DistinctResult
}

export const CLUSTER_SIZES = [3, 5] as const
const WARMUP_MS = 300
const SERIAL_MS = 800

const effectLock: RedlockPeer = {
  name: "effect-lock",
  version: versionOf("effect-lock"),
  usage: "`withLock(key, body)` on `RedlockBackend.layer({ nodes })`, defaults",
  open: (urls) =>
    Effect.map(
      Layer.build(RedlockBackend.layer({ nodes: [...urls] })).pipe(
        Effect.mapError((cause) => new LockFailure({ library: "effect-lock", cause }))
      ),
      (context): LockClient => ({
        // Its requirement (LockBackend) is met by `context`, provided once around the scenario.
        withLock: <A>(key: string, body: Effect.Effect<A>) =>
          (withLock(key, body) as unknown as Effect.Effect<A, unknown>).pipe(
            Effect.mapError((cause) => new LockFailure({ library: "effect-lock", cause }))
          ),
        context: Context.make(LockBackend, Context.get(context, LockBackend)) as Context.Context<never>
      })
    )
}

const redlock: RedlockPeer = {
  name: "redlock",
  version: versionOf("redlock"),
  usage: "`new Redlock(clients, { retryCount: -1 })`, `redlock.using([key], 30000, routine)`",
  open: (urls) =>
    Effect.gen(function*() {
      const library = "redlock"
      const clients = yield* Effect.forEach(urls, (url) => plainClient(library, url))
      const lock = new Redlock(clients, { retryCount: -1 })
      const stragglers = makeStragglers(library)
      yield* Effect.addFinalizer(() => stragglers.settle)
      return {
        withLock: <A>(key: string, body: Effect.Effect<A>) =>
          Effect.suspend(() => {
            let abandoned = false
            return abandonable(
              library,
              stragglers,
              () => lock.using([key], 30_000, () => (abandoned ? Promise.resolve(undefined) : Effect.runPromise(body))),
              () => Promise.resolve()
            ).pipe(
              Effect.onInterrupt(() => Effect.sync(() => (abandoned = true))),
              Effect.map((a) => a as A)
            )
          }),
        context: Context.empty()
      } satisfies LockClient
    })
}

const redisSemaphore: RedlockPeer = {
  name: "redis-semaphore",
  version: versionOf("redis-semaphore"),
  usage: "`new RedlockMutex(clients, key)`, `acquire()` / `release()`, defaults",
  open: (urls) =>
    Effect.flatMap(
      Effect.forEach(urls, (url) => plainClient("redis-semaphore", url)),
      (clients) => redisSemaphoreClient((key) => new RedlockMutex(clients, key))
    )
}

export const redlockPeers: ReadonlyArray<RedlockPeer> = [effectLock, redlock, redisSemaphore]

/** `n` throw-away servers, stopped however `use` ends. */
const withServers = <A, E>(n: number, use: (servers: ReadonlyArray<RedisServer>) => Effect.Effect<A, E>) =>
  Effect.acquireUseRelease(
    Effect.promise(() => Promise.all(Array.from({ length: n }, () => startRedisServer()))),
    use,
    (servers) => Effect.promise(() => Promise.all(servers.map((server) => server.stop())))
  )

/** Flush every node, then run `f` with a fresh client of `peer` on the nodes, in its context. */
const withPeer = <A, E>(
  urls: ReadonlyArray<string>,
  peer: RedlockPeer,
  f: (client: LockClient) => Effect.Effect<A, E>
): Effect.Effect<A, E | LockFailure> =>
  Effect.scoped(Effect.gen(function*() {
    yield* Effect.promise(() =>
      Promise.all(urls.map(async (url) => {
        const admin = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 1 })
        await admin.connect()
        await admin.flushall()
        admin.disconnect()
      }))
    )
    const client = yield* peer.open(urls)
    return yield* Effect.provide(f(client), client.context)
  }))

/**
 * Every selected peer on 3 and then 5 nodes. `only` keeps the peers whose names it lists
 * (`BENCH_LIBS`).
 */
export const redlockScenario = (
  ctx: BenchContext,
  only: ReadonlyArray<string> | undefined
): Effect.Effect<ReadonlyArray<Outcome<RedlockResult>>> =>
  withServers(Math.max(...CLUSTER_SIZES), (servers) =>
    Effect.gen(function*() {
      const peers = redlockPeers.filter((peer) => only === undefined || only.includes(peer.name))
      const outcomes: Array<Outcome<RedlockResult>> = []
      for (const size of CLUSTER_SIZES) {
        const urls = servers.slice(0, size).map((server) => server.url)
        const serial = new Map<string, Array<SerialRound> | Failed>(peers.map((peer) => [peer.name, []]))
        const distinct = new Map<string, Array<DistinctRound> | Failed>(peers.map((peer) => [peer.name, []]))
        const inRounds = <R>(
          rounds: number,
          collected: Map<string, Array<R> | Failed>,
          run: (peer: RedlockPeer) => Effect.Effect<R, unknown>
        ) =>
          Effect.gen(function*() {
            for (let round = 0; round < rounds; round++) {
              for (const peer of peers) {
                const sofar = collected.get(peer.name)!
                if (isFailed(sofar)) continue
                const exit = yield* Effect.exit(run(peer))
                if (exit._tag === "Success") sofar.push(exit.value)
                else collected.set(peer.name, { library: peer.name, error: String(exit.cause) })
              }
            }
          })
        yield* inRounds(SERIAL_ROUNDS, serial, (peer) =>
          withPeer(urls, peer, (client) =>
            timeLoop(
              client.withLock(`bench:redlock:serial:${peer.name}`, Effect.void),
              window(ctx, WARMUP_MS),
              window(ctx, SERIAL_MS)
            )))
        yield* inRounds(DISTINCT_ROUNDS, distinct, (peer) =>
          withPeer(
            urls,
            peer,
            (client) => concurrentLoops(ctx, FIBERS, (i) => client.withLock(`bench:redlock:distinct:${i}`, Effect.void))
          ))
        for (const peer of peers) {
          const s = serial.get(peer.name)!
          const d = distinct.get(peer.name)!
          if (isFailed(s) || isFailed(d)) {
            const failed = isFailed(s) ? s : d as Failed
            outcomes.push({ library: `${peer.name}, ${size} nodes`, error: failed.error })
          } else {
            outcomes.push({
              library: peer.name,
              nodes: size,
              serial: combineSerial(peer.name, s),
              distinct: combineDistinct(peer.name, d)
            })
          }
        }
      }
      return outcomes
    }))
