/**
 * The mutex's scripts (`lua/*.lua`, Redisson's RLock layout), each with its typed input and its
 * decoded reply. The Lua files are the single source of truth for what each returns.
 */
import { Option } from "effect"
import type {
  AcquireResult,
  HandOverResult,
  LockInfo,
  LockRequest,
  ReleaseResult,
  RenewResult
} from "../../LockBackend.js"
import type { RedisKeys } from "./keys.js"
import { unlockMessage } from "./keys.js"
import type { Script } from "./scripts.js"
import { defineScript } from "./scripts.js"

const renewed: RenewResult = { _tag: "Renewed" }
const stolen: RenewResult = { _tag: "Lost", reason: "stolen" }
const expired: RenewResult = { _tag: "Lost", reason: "expired" }
const released: ReleaseResult = { _tag: "Released" }
const stillHeld: ReleaseResult = { _tag: "StillHeld" }
const notHeld: ReleaseResult = { _tag: "NotHeld" }

const isToken = (value: unknown): value is string => typeof value === "string" && /^\d+$/.test(value)

export const acquire = defineScript({
  name: "acquire",
  encode: (keys: RedisKeys, request: LockRequest) =>
    [[keys.lock, keys.token], [String(request.leaseMillis), request.owner, request.fencing ? "1" : "0"]] as const,
  decode: (reply): AcquireResult | undefined => {
    if (!Array.isArray(reply)) return undefined
    const [status, value] = reply as [unknown, unknown]
    if (status === 1 && isToken(value)) return { _tag: "Acquired", fencingToken: BigInt(value) }
    if (status === 0 && typeof value === "number") return { _tag: "Busy", ttlMillis: value < 0 ? undefined : value }
    return undefined
  }
})

export const renew = defineScript({
  name: "renew",
  encode: (locks: ReadonlyArray<string>, requests: ReadonlyArray<LockRequest>) =>
    [locks, requests.flatMap((request) => [String(request.leaseMillis), request.owner])] as const,
  decode: (reply): ReadonlyArray<RenewResult> | undefined => {
    if (!Array.isArray(reply)) return undefined
    const results: Array<RenewResult> = []
    for (const status of reply) {
      if (status === 1) results.push(renewed)
      else if (status === 0) results.push(stolen)
      else if (status === -1) results.push(expired)
      else return undefined
    }
    return results
  }
})

export const release = defineScript({
  name: "release",
  encode: (keys: RedisKeys, owner: string) =>
    [[keys.lock, keys.channel], [owner, unlockMessage, keys.publish]] as const,
  decode: (reply): ReleaseResult | undefined =>
    reply === 1 ? released : reply === 0 ? stillHeld : reply === -1 ? notHeld : undefined
})

export const handOver = defineScript({
  name: "hand-over",
  encode: (keys: RedisKeys, from: string, to: LockRequest, ownSubscriptions: 0 | 1) =>
    [
      [keys.lock, keys.channel, keys.token],
      [
        from,
        unlockMessage,
        to.owner,
        String(to.leaseMillis),
        to.fencing ? "1" : "0",
        String(ownSubscriptions),
        keys.publish,
        keys.numsub
      ]
    ] as const,
  decode: (reply): HandOverResult | undefined => {
    if (!Array.isArray(reply)) return undefined
    const [status, token] = reply as [unknown, unknown]
    if (status === 2 && isToken(token)) return { _tag: "HandedOver", fencingToken: BigInt(token) }
    return status === 1 ? released : status === 0 ? stillHeld : status === -1 ? notHeld : undefined
  }
})

export const forceRelease = defineScript({
  name: "force-release",
  encode: (keys: RedisKeys) => [[keys.lock, keys.channel], [unlockMessage, keys.publish]] as const,
  decode: (reply): boolean | undefined => reply === 1 ? true : reply === 0 ? false : undefined
})

export const inspect = defineScript({
  name: "inspect",
  encode: (lock: string) => [[lock], []] as const,
  decode: (reply): Option.Option<Omit<LockInfo, "key">> | undefined => {
    if (reply === null) return Option.none()
    if (!Array.isArray(reply) || typeof reply[0] !== "number") return undefined
    const holders: Array<{ owner: string; holdCount: number }> = []
    for (let i = 1; i + 1 < reply.length; i += 2) {
      holders.push({ owner: String(reply[i]), holdCount: Number(reply[i + 1]) })
    }
    return Option.some({ holders, ttlMillis: reply[0] < 0 ? undefined : reply[0] })
  }
})

/** Every script the backend loads when it starts. */
export const all: ReadonlyArray<Script<never, unknown>> = [
  acquire,
  renew,
  release,
  handOver,
  forceRelease,
  inspect
] as never
