/**
 * A read-write lock: many readers at once, or one writer alone. Reads and writes are reentrant
 * within the region that holds them; a writer may take the read lock (a downgrade: release the
 * write lock afterwards and the read lock remains); a reader asking for the write lock fails at
 * once with `LockUpgradeError` rather than deadlocking. Writers go first: while a writer waits, new
 * readers wait behind it, so a stream of readers cannot starve it. Each hold, read or write, has
 * the shapes and guarantees of `Lock`: its own lease and watchdog, a fencing token, loss that
 * interrupts its program with `LockLostError`.
 *
 * On Redis it speaks Redisson's `RedissonReadLock`/`RedissonWriteLock` layout (the hash at the name
 * with its `mode` field, a timeout key per reader, channel `redisson_rwlock:{name}`). See
 * `docs/read-write-lock.md`.
 *
 * @since 0.3.0
 */
import type { Effect, Option, Scope } from "effect"
import { makeAcquire, makeTryAcquire, makeWithLock } from "./internal/lock/family.js"
import { readEntry, writeEntry } from "./internal/lock/readWrite.js"
import type { Lease, LockOptions, NotAnAsyncFunction, Program, WithLockError } from "./Lock.js"
import type { LockBackend } from "./LockBackend.js"
import type { LockBackendError, LockOptionsError, LockTimeoutError, LockUpgradeError } from "./LockError.js"

/**
 * Run `program` holding the read lock on `key` (shared with other readers), waiting as long as
 * `options.wait` allows. All the forms of `Lock.withLock`.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { MemoryBackend, ReadWriteLock } from "effect-lock"
 *
 * const read = ReadWriteLock.withReadLock("catalog", Effect.log("reading"))
 * const write = Effect.log("writing").pipe(ReadWriteLock.withWriteLock("catalog", { wait: "5 seconds" }))
 * Effect.runPromise(
 *   Effect.all([read, read, write], { concurrency: "unbounded" }).pipe(Effect.provide(MemoryBackend.layer))
 * )
 * ```
 *
 * @since 0.3.0
 * @category combinators
 */
export const withReadLock: {
  <A, E, R>(
    key: string,
    program: Program<A, E, R>,
    options?: LockOptions | undefined
  ): Effect.Effect<A, E | WithLockError, R | LockBackend>
  (
    key: string,
    options?: LockOptions | undefined
  ): <A, E, R>(program: Program<A, E, R>) => Effect.Effect<A, E | WithLockError, R | LockBackend>
  /** Not an overload to call: it is here so that passing an async function explains itself. */
  (key: string, program: NotAnAsyncFunction, options?: LockOptions | undefined): never
} = makeWithLock(readEntry) as never

/**
 * Run `program` holding the write lock on `key` (alone), waiting as long as `options.wait` allows.
 * Inside a region that holds the read lock on `key` it fails at once with `LockUpgradeError`.
 *
 * @since 0.3.0
 * @category combinators
 */
export const withWriteLock: {
  <A, E, R>(
    key: string,
    program: Program<A, E, R>,
    options?: LockOptions | undefined
  ): Effect.Effect<A, E | WithLockError | LockUpgradeError, R | LockBackend>
  (
    key: string,
    options?: LockOptions | undefined
  ): <A, E, R>(program: Program<A, E, R>) => Effect.Effect<A, E | WithLockError | LockUpgradeError, R | LockBackend>
  /** Not an overload to call: it is here so that passing an async function explains itself. */
  (key: string, program: NotAnAsyncFunction, options?: LockOptions | undefined): never
} = makeWithLock(writeEntry) as never

/**
 * Take the read lock on `key` for the rest of the current scope.
 *
 * @since 0.3.0
 * @category constructors
 */
export const acquireRead: (
  key: string,
  options?: LockOptions | undefined
) => Effect.Effect<Lease, LockTimeoutError | LockBackendError | LockOptionsError, Scope.Scope | LockBackend> =
  makeAcquire(readEntry)

/**
 * Take the write lock on `key` for the rest of the current scope.
 *
 * @since 0.3.0
 * @category constructors
 */
export const acquireWrite: (
  key: string,
  options?: LockOptions | undefined
) => Effect.Effect<
  Lease,
  LockUpgradeError | LockTimeoutError | LockBackendError | LockOptionsError,
  Scope.Scope | LockBackend
> = makeAcquire(writeEntry)

/**
 * One attempt at the read lock on `key`, for the rest of the current scope; `None` when it is not
 * available (a writer holds it, or waits for it).
 *
 * @since 0.3.0
 * @category constructors
 */
export const tryAcquireRead: (
  key: string,
  options?: LockOptions | undefined
) => Effect.Effect<Option.Option<Lease>, LockBackendError | LockOptionsError, Scope.Scope | LockBackend> =
  makeTryAcquire(readEntry)

/**
 * One attempt at the write lock on `key`, for the rest of the current scope; `None` when anybody
 * else holds the lock.
 *
 * @since 0.3.0
 * @category constructors
 */
export const tryAcquireWrite: (
  key: string,
  options?: LockOptions | undefined
) => Effect.Effect<
  Option.Option<Lease>,
  LockUpgradeError | LockBackendError | LockOptionsError,
  Scope.Scope | LockBackend
> = makeTryAcquire(writeEntry)
