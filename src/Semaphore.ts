/**
 * A distributed semaphore with leased permits: up to `permits` holders at once across every
 * process, each acquisition of `n` permits a lease of its own, renewed by its holder's watchdog and
 * given back when its scope closes, when its process dies (the lease runs out), or when it is lost
 * (the program is interrupted with `LockLostError`, as for the mutex). On Redis it speaks the layout
 * of Redisson's `RPermitExpirableSemaphore`, with time taken from the server. See
 * `docs/semaphore.md`.
 *
 * ```ts
 * import { Effect } from "effect"
 * import { MemoryBackend, Semaphore } from "effect-lock"
 *
 * const call = Effect.log("calling the partner API")
 *
 * Effect.scoped(Semaphore.withPermits("partner-api", 1, call, { permits: 8 }))
 * Semaphore.withPermits("partner-api", 2, call, { permits: 8, wait: "5 seconds" })
 * call.pipe(Semaphore.withPermits("partner-api", 1, { permits: 8 }))
 * Semaphore.withPermits("partner-api", 1, (lease) => Effect.log(`token ${lease.fencingToken}`), { permits: 8 })
 *   .pipe(Effect.provide(MemoryBackend.layer))
 * ```
 *
 * @since 0.3.0
 */
import type { Scope } from "effect"
import { Effect, Option } from "effect"
import { backendOf } from "./internal/backend/make.js"
import { resolveOptions, validateKeyFor } from "./internal/lock/options.js"
import type { PermitLease, PermitProgram, PermitsWanted } from "./internal/semaphore/enter.js"
import { acquireScoped, once, runWithPermits, supportOf, waiting } from "./internal/semaphore/enter.js"
import type { LockOptions } from "./Lock.js"
import { LockBackend } from "./LockBackend.js"
import type { LockLostError, LockTimeoutError } from "./LockError.js"
import type { LockBackendError } from "./LockError.js"
import { LockOptionsError } from "./LockError.js"

export type {
  /**
   * @since 0.3.0
   * @category models
   */
  PermitLease,
  /**
   * @since 0.3.0
   * @category models
   */
  PermitProgram
}

/**
 * The options of the mutex (`lease`, `renew`, `wait`, `retry`, `fencing`), per acquisition, and the
 * semaphore's total.
 *
 * @since 0.3.0
 * @category options
 */
export interface SemaphoreOptions extends LockOptions {
  /**
   * The semaphore's total, set when the semaphore does not exist yet (Redisson's `trySetPermits`):
   * a whole number from 1 to 2^31 - 1. An existing semaphore keeps its total (change it with
   * `setPermits`). Without it, a semaphore nobody created has no permits, and acquiring waits.
   */
  readonly permits?: number | undefined
}

/**
 * A semaphore as the backend sees it.
 *
 * @since 0.3.0
 * @category models
 */
export interface SemaphoreInfo {
  readonly key: string
  /** Free permits; negative after `setPermits` shrank the total below what is held. */
  readonly available: number
  /** Permits held by live acquisitions. */
  readonly acquired: number
  /** `available + acquired`. */
  readonly total: number
}

/**
 * Every error `withPermits` adds to the program's own.
 *
 * @since 0.3.0
 * @category errors
 */
export type WithPermitsError = LockTimeoutError | LockLostError | LockBackendError | LockOptionsError

/** The largest total and permit count: Redis' integers are 64-bit, but counts stay exact in Lua's doubles. */
export const MAX_PERMITS = 2 ** 31 - 1

const permitCount = (field: string, value: unknown, min: number): Effect.Effect<number, LockOptionsError> =>
  typeof value === "number" && Number.isInteger(value) && value >= min && value <= MAX_PERMITS
    ? Effect.succeed(value)
    : Effect.fail(
      new LockOptionsError({
        field,
        reason: `must be a whole number from ${min} to ${MAX_PERMITS}, got ${String(value)}`
      })
    )

const validate = (
  key: string,
  permits: number,
  options: SemaphoreOptions | undefined
): Effect.Effect<PermitsWanted, LockOptionsError, LockBackend> =>
  Effect.gen(function*() {
    const validKey = yield* validateKeyFor(yield* LockBackend, key)
    const n = yield* permitCount("permits (requested)", permits, 1)
    const total = options?.permits === undefined ? undefined : yield* permitCount("permits", options.permits, 1)
    if (total !== undefined && n > total) {
      return yield* new LockOptionsError({
        field: "permits (requested)",
        reason: `asks for ${n} permits of a semaphore of ${total}: it could never be granted`
      })
    }
    const resolved = yield* resolveOptions(options)
    return { key: validKey, permits: n, total, options: resolved }
  })

const isProgram = (u: unknown): boolean => Effect.isEffect(u) || typeof u === "function"

/**
 * Run `program` holding `n` permits of the semaphore `key`, waiting for them as long as
 * `options.wait` allows (no limit by default). The permits come back when the program ends, however
 * it ends; if their lease is lost while the program runs, the program is interrupted and the result
 * is a `LockLostError`. Waiters in one process are served in arrival order: a request for many
 * permits is not overtaken by later requests for few.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { MemoryBackend, Semaphore } from "effect-lock"
 *
 * const fetchPage = (n: number) => Effect.log(`page ${n}`)
 * const crawl = Effect.forEach(
 *   [1, 2, 3, 4, 5, 6],
 *   (n) => Semaphore.withPermits("crawler", 1, fetchPage(n), { permits: 2 }),
 *   { concurrency: "unbounded" }
 * )
 * Effect.runPromise(Effect.provide(crawl, MemoryBackend.layer))
 * ```
 *
 * @since 0.3.0
 * @category combinators
 */
export const withPermits: {
  <A, E, R>(
    key: string,
    n: number,
    program: PermitProgram<A, E, R>,
    options?: SemaphoreOptions | undefined
  ): Effect.Effect<A, E | WithPermitsError, R | LockBackend>
  (
    key: string,
    n: number,
    options?: SemaphoreOptions | undefined
  ): <A, E, R>(program: PermitProgram<A, E, R>) => Effect.Effect<A, E | WithPermitsError, R | LockBackend>
} = function(...args: ReadonlyArray<unknown>) {
  const key = args[0] as string
  const n = args[1] as number
  const run = (program: PermitProgram<unknown, unknown, unknown>, options: SemaphoreOptions | undefined) =>
    Effect.flatMap(validate(key, n, options), (wanted) => runWithPermits(wanted, waiting, program))
  if (isProgram(args[2])) {
    return run(args[2] as PermitProgram<unknown, unknown, unknown>, args[3] as SemaphoreOptions | undefined)
  }
  return (program: PermitProgram<unknown, unknown, unknown>) => run(program, args[2] as SemaphoreOptions | undefined)
} as never

/**
 * Run `program` with `n` permits only if they can be had with one attempt; `None` when too few are
 * free.
 *
 * @since 0.3.0
 * @category combinators
 */
export const withPermitsIfAvailable: {
  <A, E, R>(
    key: string,
    n: number,
    program: PermitProgram<A, E, R>,
    options?: SemaphoreOptions | undefined
  ): Effect.Effect<Option.Option<A>, E | Exclude<WithPermitsError, LockTimeoutError>, R | LockBackend>
  (
    key: string,
    n: number,
    options?: SemaphoreOptions | undefined
  ): <A, E, R>(
    program: PermitProgram<A, E, R>
  ) => Effect.Effect<Option.Option<A>, E | Exclude<WithPermitsError, LockTimeoutError>, R | LockBackend>
} = function(...args: ReadonlyArray<unknown>) {
  const key = args[0] as string
  const n = args[1] as number
  const run = (program: PermitProgram<unknown, unknown, unknown>, options: SemaphoreOptions | undefined) =>
    Effect.flatMap(validate(key, n, options), (wanted) =>
      Effect.map(
        runWithPermits(
          wanted,
          once,
          Effect.isEffect(program)
            ? Effect.map(program, Option.some)
            : (lease: PermitLease) => Effect.map(program(lease), Option.some)
        ),
        (result) => result ?? Option.none()
      ))
  if (isProgram(args[2])) {
    return run(args[2] as PermitProgram<unknown, unknown, unknown>, args[3] as SemaphoreOptions | undefined)
  }
  return (program: PermitProgram<unknown, unknown, unknown>) => run(program, args[2] as SemaphoreOptions | undefined)
} as never

/**
 * Take `n` permits of `key` for the rest of the current scope, waiting as `options` allow. Observe
 * their loss through `lease.lost` / `lease.guard`.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { Semaphore } from "effect-lock"
 *
 * const job = Effect.scoped(
 *   Effect.gen(function*() {
 *     const lease = yield* Semaphore.acquire("gpu", 2, { permits: 4, wait: "1 minute" })
 *     yield* lease.guard(Effect.log(`rendering on ${lease.permits} GPUs, token ${lease.fencingToken}`))
 *   })
 * )
 * ```
 *
 * @since 0.3.0
 * @category constructors
 */
export const acquire = (
  key: string,
  n: number,
  options?: SemaphoreOptions | undefined
): Effect.Effect<PermitLease, LockTimeoutError | LockBackendError | LockOptionsError, Scope.Scope | LockBackend> =>
  Effect.flatMap(validate(key, n, options), (wanted) => acquireScoped(wanted, waiting))

/**
 * One attempt to take `n` permits of `key` for the rest of the current scope; `None` when too few
 * are free.
 *
 * @since 0.3.0
 * @category constructors
 */
export const tryAcquire = (
  key: string,
  n: number,
  options?: SemaphoreOptions | undefined
): Effect.Effect<Option.Option<PermitLease>, LockBackendError | LockOptionsError, Scope.Scope | LockBackend> =>
  Effect.flatMap(validate(key, n, options), (wanted) => Effect.map(acquireScoped(wanted, once), Option.fromNullable))

const withSupport = <A>(
  key: string,
  use: (support: NonNullable<ReturnType<typeof backendOf>["semaphores"]>, key: string) => Effect.Effect<
    A,
    LockBackendError
  >
): Effect.Effect<A, LockBackendError | LockOptionsError, LockBackend> =>
  Effect.flatMap(
    LockBackend,
    (service) =>
      Effect.flatMap(
        validateKeyFor(service, key),
        (key) => Effect.flatMap(supportOf(backendOf(service), key), (support) => use(support, key))
      )
  )

/**
 * Free and held permits of `key`, as the backend sees it (acquisitions whose lease ran out are
 * given back first). A semaphore nobody created reads as zero of zero.
 *
 * @since 0.3.0
 * @category getters
 */
export const inspect = (key: string): Effect.Effect<SemaphoreInfo, LockBackendError | LockOptionsError, LockBackend> =>
  withSupport(key, (support, key) =>
    Effect.map(support.primitives.state(key), (state) => ({
      key,
      available: state.available,
      acquired: state.acquired,
      total: state.available + state.acquired
    })))

/**
 * How many permits of `key` are free right now (zero when a shrink left fewer than are held).
 *
 * @since 0.3.0
 * @category getters
 */
export const available = (key: string): Effect.Effect<number, LockBackendError | LockOptionsError, LockBackend> =>
  Effect.map(inspect(key), (info) => Math.max(0, info.available))

/**
 * Make the total of `key` `total` permits, now (creating the semaphore if needed). Growing it wakes
 * waiters; shrinking it never revokes a held permit: the free count goes down by the difference,
 * below zero if needed, and permits that come back fill that gap before anybody gets in again.
 *
 * @since 0.3.0
 * @category admin
 */
export const setPermits = (
  key: string,
  total: number
): Effect.Effect<void, LockBackendError | LockOptionsError, LockBackend> =>
  Effect.flatMap(
    permitCount("permits", total, 0),
    (total) => withSupport(key, (support, key) => support.primitives.setPermits(key, total))
  )
