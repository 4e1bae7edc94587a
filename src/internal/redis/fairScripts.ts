/**
 * The fair lock's scripts (`lua/fair-*.lua`, Redisson 4.7's `RedissonFairLock` layout) and its key
 * names. The lock hash, its renewal, inspection, force-release and fencing counter are the plain
 * lock's (`lockScripts.ts`): a fair lock is a plain lock with a line in front of it.
 */
import type { AcquireResult, LockRequest, ReleaseResult } from "../../LockBackend.js"
import type { PublishCommand } from "./keys.js"
import { prefixName, unlockMessage } from "./keys.js"
import type { Script } from "./scripts.js"
import { defineScript } from "./scripts.js"

export interface FairKeys {
  /** The lock hash, at the name. */
  readonly lock: string
  /** `redisson_lock_queue:{<name>}`: the line. */
  readonly queue: string
  /** `redisson_lock_timeout:{<name>}`: each waiting owner's deadline. */
  readonly timeouts: string
  /** `redisson_lock__channel:{<name>}`: a waiting owner is told on `<channel>:<owner>`. */
  readonly channel: string
  /** `redisson_lock_token:{<name>}`: the fencing counter, shared with the plain lock. */
  readonly token: string
  /** The command the scripts publish with: `spublish` on a Redis Cluster. */
  readonly publish: PublishCommand
}

export const fairKeysOf = (prefix: string, key: string, publish: PublishCommand = "publish"): FairKeys => {
  const lock = prefix + key
  return {
    lock,
    queue: prefixName("redisson_lock_queue", lock),
    timeouts: prefixName("redisson_lock_timeout", lock),
    channel: prefixName("redisson_lock__channel", lock),
    token: prefixName("redisson_lock_token", lock),
    publish
  }
}

/** The channel a waiting owner is told on (Redisson's `RedissonFairLock.subscribe`). */
export const ownerChannel = (keys: FairKeys, owner: string): string => `${keys.channel}:${owner}`

const isToken = (value: unknown): value is string => typeof value === "string" && /^\d+$/.test(value)

export const acquire = defineScript({
  name: "fair-acquire",
  encode: (keys: FairKeys, request: LockRequest, windowMillis: number) =>
    [
      [keys.lock, keys.queue, keys.timeouts, keys.token],
      [
        String(request.leaseMillis),
        request.owner,
        request.fencing ? "1" : "0",
        request.waiting === true ? "1" : "0",
        String(windowMillis)
      ]
    ] as const,
  decode: (reply): AcquireResult | undefined => {
    if (!Array.isArray(reply)) return undefined
    const [status, value] = reply as [unknown, unknown]
    if (status === 1 && isToken(value)) return { _tag: "Acquired", fencingToken: BigInt(value) }
    if (status === 0 && typeof value === "number") return { _tag: "Busy", ttlMillis: value < 0 ? undefined : value }
    return undefined
  }
})

const released: ReleaseResult = { _tag: "Released" }
const stillHeld: ReleaseResult = { _tag: "StillHeld" }
const notHeld: ReleaseResult = { _tag: "NotHeld" }

export const release = defineScript({
  name: "fair-release",
  encode: (keys: FairKeys, owner: string, windowMillis: number) =>
    [[keys.lock, keys.queue, keys.timeouts, keys.channel], [
      owner,
      unlockMessage,
      String(windowMillis),
      keys.publish
    ]] as const,
  decode: (reply): ReleaseResult | undefined =>
    reply === 1 ? released : reply === 0 ? stillHeld : reply === -1 ? notHeld : undefined
})

export const abandon = defineScript({
  name: "fair-abandon",
  encode: (keys: FairKeys, owner: string, windowMillis: number) =>
    [[keys.lock, keys.queue, keys.timeouts, keys.channel], [
      owner,
      String(windowMillis),
      unlockMessage,
      keys.publish
    ]] as const,
  decode: (reply): boolean | undefined => reply === 1 ? true : reply === 0 ? false : undefined
})

/** Every fair-lock script the backend loads when it starts. */
export const all: ReadonlyArray<Script<never, unknown>> = [acquire, release, abandon] as never
