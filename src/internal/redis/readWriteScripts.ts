/**
 * The read-write lock's scripts (`lua/rw-*.lua`, Redisson 4.7's `RedissonReadLock` and
 * `RedissonWriteLock` layout) and its key names: the hash at the name with its `mode` field, a
 * reader's field `<owner>`, the writer's `<owner>:write`, a timeout key per read hold
 * (`{<name>}:<owner>:rwlock_timeout:<n>`), the channel `redisson_rwlock:{<name>}`, the plain lock's
 * fencing counter, and one key of ours: the waiting-writer mark `{<name>}:rwlock_writer`.
 */
import { Option } from "effect"
import type { AcquireResult, LockInfo, LockRequest, ReleaseResult } from "../../LockBackend.js"
import type { PublishCommand } from "./keys.js"
import { prefixName, suffixName } from "./keys.js"
import { decodeRenewals } from "./lockScripts.js"
import type { Script } from "./scripts.js"
import { defineScript } from "./scripts.js"

export interface ReadWriteKeys {
  /** The lock hash, at the name. */
  readonly lock: string
  /** `redisson_rwlock:{<name>}`. */
  readonly channel: string
  /** `redisson_lock_token:{<name>}`: the fencing counter, shared with the plain lock. */
  readonly token: string
  /** `{<name>}:rwlock_writer`: the waiting writer that holds new readers back (ours). */
  readonly mark: string
  /** `{<name>}` (`<name>` when it holds a `{`): Redisson's prefix of every reader's timeout keys. */
  readonly base: string
  readonly publish: PublishCommand
}

export const readWriteKeysOf = (prefix: string, key: string, publish: PublishCommand = "publish"): ReadWriteKeys => {
  const lock = prefix + key
  return {
    lock,
    channel: prefixName("redisson_rwlock", lock),
    token: prefixName("redisson_lock_token", lock),
    mark: suffixName(lock, "rwlock_writer"),
    base: lock.includes("{") ? lock : `{${lock}}`,
    publish
  }
}

/** A reader's timeout prefix: hold n of `owner` is `<prefix>:<n>` (Redisson's `getReadWriteTimeoutNamePrefix`). */
export const timeoutPrefix = (keys: ReadWriteKeys, owner: string) => `${keys.base}:${owner}:rwlock_timeout`

/** The writer's field in the hash (Redisson's `RedissonWriteLock.getLockName`). */
export const writerField = (owner: string) => `${owner}:write`

/** Redisson's `LockPubSub.UNLOCK_MESSAGE` (read unlocks) and `READ_UNLOCK_MESSAGE` (write unlocks). */
const readUnlockMessage = "0"
const writeUnlockMessage = "1"

const isToken = (value: unknown): value is string => typeof value === "string" && /^\d+$/.test(value)

const decodeAcquire = (reply: unknown): AcquireResult | undefined => {
  if (!Array.isArray(reply)) return undefined
  const [status, value] = reply as [unknown, unknown]
  if (status === 1 && isToken(value)) return { _tag: "Acquired", fencingToken: BigInt(value) }
  if (status === 0 && typeof value === "number") return { _tag: "Busy", ttlMillis: value < 0 ? undefined : value }
  return undefined
}

export const readAcquire = defineScript({
  name: "rw-read-acquire",
  encode: (keys: ReadWriteKeys, request: LockRequest) =>
    [
      [keys.lock, timeoutPrefix(keys, request.owner), keys.token, keys.mark, keys.base],
      [String(request.leaseMillis), request.owner, request.fencing ? "1" : "0"]
    ] as const,
  decode: decodeAcquire
})

export const writeAcquire = defineScript({
  name: "rw-write-acquire",
  encode: (keys: ReadWriteKeys, request: LockRequest, windowMillis: number) =>
    [
      [keys.lock, keys.token, keys.mark, keys.base],
      [
        String(request.leaseMillis),
        writerField(request.owner),
        request.fencing ? "1" : "0",
        request.waiting === true ? "1" : "0",
        String(windowMillis)
      ]
    ] as const,
  decode: decodeAcquire
})

const released: ReleaseResult = { _tag: "Released" }
const stillHeld: ReleaseResult = { _tag: "StillHeld" }
const notHeld: ReleaseResult = { _tag: "NotHeld" }
const decodeRelease = (reply: unknown): ReleaseResult | undefined =>
  reply === 1 ? released : reply === 0 ? stillHeld : reply === -1 ? notHeld : undefined

export const readRelease = defineScript({
  name: "rw-read-release",
  encode: (keys: ReadWriteKeys, owner: string) =>
    [[keys.lock, keys.channel, timeoutPrefix(keys, owner), keys.base], [
      owner,
      readUnlockMessage,
      keys.publish
    ]] as const,
  decode: decodeRelease
})

export const writeRelease = defineScript({
  name: "rw-write-release",
  encode: (keys: ReadWriteKeys, owner: string) =>
    [[keys.lock, keys.channel, keys.base], [writerField(owner), writeUnlockMessage, keys.publish]] as const,
  decode: decodeRelease
})

export type Side = "read" | "write"

export const renew = defineScript({
  name: "rw-renew",
  encode: (side: Side, keysOf: (key: string) => ReadWriteKeys, requests: ReadonlyArray<LockRequest>) =>
    [
      requests.flatMap((request) => {
        const keys = keysOf(request.key)
        return [keys.lock, timeoutPrefix(keys, request.owner)]
      }),
      requests.flatMap((request) => [
        String(request.leaseMillis),
        side === "read" ? request.owner : writerField(request.owner),
        side
      ])
    ] as const,
  decode: decodeRenewals
})

export const abandon = defineScript({
  name: "rw-abandon",
  encode: (keys: ReadWriteKeys, owner: string) =>
    [[keys.mark, keys.channel], [writerField(owner), readUnlockMessage, keys.publish]] as const,
  decode: (reply): boolean | undefined => reply === 1 ? true : reply === 0 ? false : undefined
})

export const forceRelease = defineScript({
  name: "rw-force-release",
  encode: (keys: ReadWriteKeys, side: Side) =>
    [[keys.lock, keys.channel], [
      side,
      side === "read" ? readUnlockMessage : writeUnlockMessage,
      keys.publish
    ]] as const,
  decode: (reply): boolean | undefined => reply === 1 ? true : reply === 0 ? false : undefined
})

/** The hash as `inspect.lua` returns it, without the `mode` field. */
export const holdersOf = (
  info: Option.Option<Omit<LockInfo, "key">>
): Option.Option<Omit<LockInfo, "key">> =>
  Option.map(info, (info) => ({ ...info, holders: info.holders.filter((holder) => holder.owner !== "mode") }))

/** Every read-write script the backend loads when it starts. */
export const all: ReadonlyArray<Script<never, unknown>> = [
  readAcquire,
  writeAcquire,
  readRelease,
  writeRelease,
  renew,
  abandon,
  forceRelease
] as never
