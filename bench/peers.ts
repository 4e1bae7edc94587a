/**
 * Every library behind one interface, each used the way its README shows:
 *
 * - effect-lock: `withLock(key, body)` on `RedisBackend.layer({ url })` (defaults: 30 s lease,
 *   watchdog, fencing, pub/sub-woken waiting);
 * - redlock 5: `redlock.using([key], 30_000, routine)` (auto-extension) with `retryCount: -1`
 *   (wait as long as it takes), other settings default (retry every 200 ± 100 ms);
 * - redis-semaphore: `new Mutex(redis, key)`, `acquire()` / `release()`, defaults (10 s lock
 *   timeout refreshed every 8 s, polls every 10 ms, gives up after 10 s);
 * - effect-distributed-lock: `DistributedSemaphore.make(key, { limit: 1 })` then
 *   `withPermits(1)(body)` on `RedisBacking.layer(redis)` (polls every 100 ms and, per waiter, a
 *   pub/sub subscription on a connection of its own).
 *
 * Peers get a plain `new Redis(url)`: their documented setup. The bench drives everything as
 * Effect fibers, so the promise-based peers are wrapped in `Effect.async`; that wrapper costs well
 * under a microsecond per call. Every `withLock` is interruptible: the promise-based peers cannot
 * cancel an acquire in flight, so an abandoned acquire that succeeds later is released at once,
 * and `close` waits for those stragglers before the next library runs.
 */
import { Context, Data, Effect, Layer } from "effect"
import type { Scope } from "effect"
import { DistributedSemaphore, RedisBacking } from "effect-distributed-lock"
import { Redis } from "ioredis"
import { readFileSync } from "node:fs"
import { Mutex } from "redis-semaphore"
import type { default as RedlockClass } from "../node_modules/redlock/dist/index.js"
// @ts-expect-error redlock 5.0.0-beta.2's "exports" map has no "types" entry, so NodeNext cannot see its typings
import RedlockModule from "redlock"
import type * as EffectLock from "../src/index.js"
import type * as EffectLockRedisBackend from "../src/RedisBackend.js"

// effect-lock runs from its build (`dist/`, which `npm run bench` makes first with `npm run build`):
// the JavaScript its users install, not the TypeScript sources through tsx's loader. The path is a
// variable so that type-checking does not need a build.
// `RedisBackend` is not re-exported from the root (the root must load without ioredis): it comes
// from its own module, as users import it from `effect-lock/RedisBackend`.
const effectLockBuild = "../dist/index.js"
const effectLockRedisBuild = "../dist/RedisBackend.js"
const { LockBackend, withLock: effectLockWithLock } = (await import(effectLockBuild)) as typeof EffectLock
const RedisBackend = (await import(effectLockRedisBuild)) as typeof EffectLockRedisBackend

/** Any failure a library reports from `withLock`. */
export class LockFailure extends Data.TaggedError("LockFailure")<{
  readonly library: string
  readonly cause: unknown
}> {}

export interface LockClient {
  /** Run `body` while holding the lock on `key`, waiting for it as long as it takes. */
  readonly withLock: <A>(key: string, body: Effect.Effect<A>) => Effect.Effect<A, LockFailure>
  /**
   * The services `withLock` reads from the context (the Effect-based libraries' backends), which
   * `withClient` provides once around a whole scenario, as an application provides its layers once
   * at the top, rather than on every call. Empty for the promise-based peers.
   */
  readonly context: Context.Context<never>
}

/** A call whose requirements the scenario's context (`LockClient.context`) meets. */
const inScenarioContext = <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E> =>
  effect as unknown as Effect.Effect<A, E>

export interface LockLibrary {
  readonly name: string
  readonly version: string
  /** The call the bench makes, for the report. */
  readonly usage: string
  /** How a waiter learns that the lock is free. */
  readonly waiting: string
  /** Whether a nested acquire of a held key by the same caller enters without waiting. */
  readonly reentrant: boolean
  /** Connect; everything opened is closed with the scope (after in-flight stragglers settle). */
  readonly open: (url: string) => Effect.Effect<LockClient, LockFailure, Scope.Scope>
}

export const Redlock = RedlockModule as typeof RedlockClass

// Read from disk: not every package exports its `package.json`.
export const versionOf = (pkg: string): string => {
  const path = pkg === "effect-lock" ? "../package.json" : `../node_modules/${pkg}/package.json`
  const { version } = JSON.parse(readFileSync(new URL(path, import.meta.url), "utf8")) as { version: string }
  return version.replace(/^v/, "")
}

/** Problems that surfaced outside any `withLock` (ioredis error events, late releases). */
export const backgroundErrors: Array<string> = []
export const record = (library: string) => (error: unknown) => {
  backgroundErrors.push(`${library}: ${error instanceof Error ? error.message : String(error)}`)
}

/** A plain ioredis client, as the peers' READMEs create it, quit with the scope. */
export const plainClient = (library: string, url: string) =>
  Effect.acquireRelease(
    Effect.tryPromise({
      try: async () => {
        const redis = new Redis(url, { lazyConnect: true })
        redis.on("error", record(library))
        await redis.connect()
        return redis
      },
      catch: (cause) => new LockFailure({ library, cause })
    }),
    (redis) => Effect.promise(() => redis.quit().catch(() => redis.disconnect()))
  )

/**
 * Promises still running after their caller gave up; `settle` waits for them (bounded), so that
 * no library's tail leaks into the next library's measurements.
 */
export const makeStragglers = (library: string) => {
  const pending = new Set<Promise<unknown>>()
  return {
    track: (promise: Promise<unknown>) => {
      const tracked = promise.catch(record(library)).finally(() => pending.delete(tracked))
      pending.add(tracked)
    },
    settle: Effect.promise(() =>
      Promise.race([
        Promise.allSettled(Array.from(pending)),
        new Promise((resolve) => setTimeout(resolve, 15_000).unref())
      ])
    ).pipe(Effect.andThen(Effect.sync(() => {
      if (pending.size > 0) record(library)(new Error(`${pending.size} abandoned acquisitions still pending`))
    })))
  }
}

/**
 * A promise-returning acquire as an interruptible Effect: on interruption the signal aborts it,
 * and if it succeeds anyway `late` undoes it.
 */
export const abandonable = <T>(
  library: string,
  stragglers: ReturnType<typeof makeStragglers>,
  start: (signal: AbortSignal) => Promise<T>,
  late: (value: T) => Promise<unknown>
): Effect.Effect<T, LockFailure> =>
  Effect.async<T, LockFailure>((resume) => {
    const controller = new AbortController()
    let abandoned = false
    const promise = start(controller.signal).then(
      (value) => {
        if (abandoned) return late(value)
        resume(Effect.succeed(value))
      },
      (cause: unknown) => {
        if (!abandoned) resume(Effect.fail(new LockFailure({ library, cause })))
      }
    )
    return Effect.sync(() => {
      abandoned = true
      controller.abort()
      stragglers.track(promise)
    })
  })

// --- effect-lock ----------------------------------------------------------------------------------

export const effectLock: LockLibrary = {
  name: "effect-lock",
  version: versionOf("effect-lock"),
  usage: "`withLock(key, body)` on `RedisBackend.layer({ url })`, defaults",
  waiting:
    "a release in the same process hands the lock to the next local waiter in its own round trip; otherwise a pub/sub release notification (one subscriber connection), FIFO wake-one; retry schedule as safety net",
  reentrant: true,
  open: (url) =>
    Effect.map(
      Layer.build(RedisBackend.layer({ url })).pipe(
        Effect.mapError((cause) => new LockFailure({ library: "effect-lock", cause }))
      ),
      (context): LockClient => {
        const backend = Context.get(context, LockBackend)
        return {
          withLock: (key, body) =>
            inScenarioContext(effectLockWithLock(key, body)).pipe(
              Effect.mapError((cause) => new LockFailure({ library: "effect-lock", cause }))
            ),
          context: Context.make(LockBackend, backend) as Context.Context<never>
        }
      }
    )
}

// --- redlock --------------------------------------------------------------------------------------

export const redlock: LockLibrary = {
  name: "redlock",
  version: versionOf("redlock"),
  usage: "`redlock.using([key], 30000, routine)`, `retryCount: -1`, other settings default",
  waiting: "polls every 200 ± 100 ms (retryDelay, retryJitter)",
  reentrant: false,
  open: (url) =>
    Effect.gen(function*() {
      const library = "redlock"
      const redis = yield* plainClient(library, url)
      const lock = new Redlock([redis], { retryCount: -1 })
      // Redlock emits every failed attempt ("resource locked") as an "error" event; it installs a
      // no-op listener of its own, so nothing to do here.
      const stragglers = makeStragglers(library)
      yield* Effect.addFinalizer(() => stragglers.settle)
      return {
        withLock: <A>(key: string, body: Effect.Effect<A>) =>
          Effect.suspend(() => {
            // `using` runs acquire, routine and release in one promise. An abandoned call still
            // acquires eventually; its routine then does nothing and `using` releases at once.
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

// --- redis-semaphore ------------------------------------------------------------------------------

export const redisSemaphore: LockLibrary = {
  name: "redis-semaphore",
  version: versionOf("redis-semaphore"),
  usage: "`new Mutex(redis, key)`, `acquire()` / `release()`, defaults",
  waiting: "polls every 10 ms (retryInterval), gives up after 10 s (acquireTimeout)",
  reentrant: false,
  open: (url) =>
    Effect.flatMap(plainClient("redis-semaphore", url), (redis) => redisSemaphoreClient((key) => new Mutex(redis, key)))
}

/** What redis-semaphore's mutexes (`Mutex`, `RedlockMutex`) offer: acquire with a signal, release. */
interface RedisSemaphoreMutex {
  acquire(signal?: AbortSignal): Promise<void>
  release(): Promise<void>
}

/**
 * A client over one of redis-semaphore's mutexes, made fresh per call by `make`: `acquire()`, the
 * body, `release()`, with an abandoned acquisition released once it completes.
 */
export const redisSemaphoreClient = (
  make: (key: string) => RedisSemaphoreMutex
): Effect.Effect<LockClient, never, Scope.Scope> =>
  Effect.gen(function*() {
    const library = "redis-semaphore"
    const stragglers = makeStragglers(library)
    yield* Effect.addFinalizer(() => stragglers.settle)
    const release = (mutex: RedisSemaphoreMutex) => Effect.promise(() => mutex.release().catch(record(library)))
    return {
      withLock: <A>(key: string, body: Effect.Effect<A>) =>
        Effect.uninterruptibleMask((restore) =>
          Effect.flatMap(
            restore(abandonable(
              library,
              stragglers,
              async (signal) => {
                const mutex = make(key)
                await mutex.acquire(signal)
                return mutex
              },
              (mutex) => mutex.release()
            )),
            (mutex) => Effect.ensuring(restore(body), release(mutex))
          )
        ),
      context: Context.empty()
    } satisfies LockClient
  })

// --- effect-distributed-lock ----------------------------------------------------------------------

export const effectDistributedLock: LockLibrary = {
  name: "effect-distributed-lock",
  version: versionOf("effect-distributed-lock"),
  usage: "`DistributedSemaphore.make(key, { limit: 1 })` (one per key, reused), `withPermits(1)(body)`",
  waiting: "polls every 100 ms, and each waiter subscribes on a connection of its own",
  reentrant: false,
  open: (url) =>
    Effect.gen(function*() {
      const library = "effect-distributed-lock"
      const redis = yield* plainClient(library, url)
      const context = yield* Layer.build(RedisBacking.layer(redis))
      const semaphores = new Map<string, DistributedSemaphore.DistributedSemaphore>()
      const semaphore = (key: string) =>
        Effect.suspend(() => {
          const known = semaphores.get(key)
          if (known !== undefined) return Effect.succeed(known)
          return Effect.tap(DistributedSemaphore.make(key, { limit: 1 }), (made) => semaphores.set(key, made))
        })
      return {
        withLock: <A>(key: string, body: Effect.Effect<A>) =>
          inScenarioContext(Effect.flatMap(semaphore(key), (sem) => sem.withPermits(1)(body))).pipe(
            Effect.mapError((cause) => new LockFailure({ library, cause }))
          ),
        context: context as Context.Context<never>
      } satisfies LockClient
    })
}

export const libraries: ReadonlyArray<LockLibrary> = [effectLock, redlock, redisSemaphore, effectDistributedLock]
