/**
 * What a campaign can be run on: lock kinds (`--kind`) and backends (`--backend`). Each is an entry
 * in a table; a new member of the family or a new backend joins the campaign by adding one entry
 * here, nothing else.
 *
 * The checker assumes an **exclusive** kind (one holder at a time, a fencing token per grant):
 * the mutex, a fair lock, the write side of a read-write lock, a semaphore of one permit, a
 * multi-lock. A kind is given the lock name, the lease options and the operation's body, and runs
 * the body while it holds the lock, passing the grant (its token, and a guard that runs an effect
 * only while the grant is still held).
 *
 * A backend says how many standalone redis-servers it needs (the runner starts them, each behind
 * one proxy per worker) and builds its layer from their (proxied) URLs.
 */
import type { Duration, Effect, Layer } from "effect"
import * as FairLock from "../src/FairLock.js"
import { withLock } from "../src/Lock.js"
import type { LockBackend } from "../src/LockBackend.js"
import type {
  LockBackendError,
  LockLostError,
  LockOptionsError,
  LockTimeoutError,
  LockUpgradeError
} from "../src/LockError.js"
import * as MultiLock from "../src/MultiLock.js"
import * as ReadWriteLock from "../src/ReadWriteLock.js"
import { RedisBackend } from "../src/RedisBackend.js"
import { RedlockBackend } from "../src/RedlockBackend.js"
import * as Semaphore from "../src/Semaphore.js"

/** What a body gets from the kind: the grant's token and its guard. */
export interface Grant {
  readonly fencingToken: bigint
  readonly guard: <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.Effect<A, E | LockLostError, R>
}

export interface KindOptions {
  readonly lease: Duration.DurationInput
  readonly wait: Duration.DurationInput
}

/** `LockUpgradeError` only from a read lock asking for the write lock, which no campaign does. */
export type KindError = LockTimeoutError | LockLostError | LockBackendError | LockOptionsError | LockUpgradeError

export interface ChaosKind {
  readonly name: string
  readonly describe: string
  readonly withLock: <A, E, R>(
    key: string,
    options: KindOptions,
    body: (grant: Grant) => Effect.Effect<A, E, R>
  ) => Effect.Effect<A, E | KindError, R | LockBackend>
}

export interface ChaosBackend {
  readonly name: string
  readonly describe: string
  /** How many standalone redis-servers it runs on. */
  readonly servers: number
  readonly layer: (urls: ReadonlyArray<string>) => Layer.Layer<LockBackend, unknown>
}

export const kinds: Readonly<Record<string, ChaosKind>> = {
  mutex: {
    name: "mutex",
    describe: "Lock.withLock (Redisson's RLock)",
    withLock: (key, options, body) => withLock(key, (lease) => body(lease), options)
  },
  fair: {
    name: "fair",
    describe: "FairLock.withLock (Redisson's RedissonFairLock)",
    withLock: (key, options, body) => FairLock.withLock(key, (lease) => body(lease), options)
  },
  write: {
    name: "write",
    describe: "ReadWriteLock.withWriteLock (Redisson's RedissonWriteLock)",
    withLock: (key, options, body) => ReadWriteLock.withWriteLock(key, (lease) => body(lease), options)
  },
  semaphore: {
    name: "semaphore",
    describe: "Semaphore.withPermits of 1 permit out of 1 (Redisson's RPermitExpirableSemaphore)",
    withLock: (key, options, body) => Semaphore.withPermits(key, 1, (lease) => body(lease), { ...options, permits: 1 })
  },
  multilock: {
    name: "multilock",
    describe: "MultiLock.withLocks over the campaign's key and a second one; the token is the first key's",
    withLock: (key, options, body) =>
      MultiLock.withLocks([key, `${key}:second`], (multi) => {
        const index = multi.keys.indexOf(key)
        const lease = multi.leases[index]
        return body({ fencingToken: lease?.fencingToken ?? -1n, guard: multi.guard })
      }, options)
  }
}

export const backends: Readonly<Record<string, ChaosBackend>> = {
  redis: {
    name: "redis",
    describe: "RedisBackend on one redis-server",
    servers: 1,
    layer: (urls) => RedisBackend.layer({ url: urls[0], commandTimeout: "1 second" })
  },
  redlock: {
    name: "redlock",
    describe: "RedlockBackend over three independent redis-servers (quorum 2)",
    servers: 3,
    layer: (urls) => RedlockBackend.layer({ nodes: urls, commandTimeout: "1 second" })
  }
}
