/**
 * The mutex's scripts (`lua/*.lua`, Redisson's RLock layout), each with its typed input and its
 * decoded reply. The Lua files are the single source of truth for what each returns.
 */
import { Option } from "effect"
import type {
  AcquireAllResult,
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

/**
 * A batched renewal's reply, one status per request in order (1 renewed, 0 another owner holds it,
 * -1 no lock): the reply of every kind's renew script.
 */
export const decodeRenewals = (reply: unknown): ReadonlyArray<RenewResult> | undefined => {
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

export const renew = defineScript({
  name: "renew",
  encode: (locks: ReadonlyArray<string>, requests: ReadonlyArray<LockRequest>) =>
    [locks, requests.flatMap((request) => [String(request.leaseMillis), request.owner])] as const,
  decode: decodeRenewals
})

/** The tokens of an `acquire-all.lua` reply `{1, token, …}`, one per lock; `undefined` if malformed. */
const tokensOf = (reply: ReadonlyArray<unknown>, locks: number): ReadonlyArray<bigint> | undefined => {
  if (reply.length !== locks + 1) return undefined
  const tokens: Array<bigint> = []
  for (const value of reply.slice(1)) {
    if (!isToken(value)) return undefined
    tokens.push(BigInt(value))
  }
  return tokens
}

/** Every lock of `requests` (their keys in `keys`, in order) or none, in one script. */
export const acquireAll = defineScript({
  name: "acquire-all",
  encode: (keys: ReadonlyArray<RedisKeys>, requests: ReadonlyArray<LockRequest>) =>
    [
      keys.flatMap((k) => [k.lock, k.token]),
      [
        String(requests[0]?.leaseMillis ?? 0),
        requests[0]?.fencing === true ? "1" : "0",
        ...requests.map((r) => r.owner)
      ]
    ] as const,
  decode: (reply): AcquireAllResult | undefined => {
    if (!Array.isArray(reply)) return undefined
    const [status, index, ttl] = reply as [unknown, unknown, unknown]
    if (status === 1) {
      const fencingTokens = tokensOf(reply, reply.length - 1)
      return fencingTokens === undefined ? undefined : { _tag: "Acquired", fencingTokens }
    }
    if (status === 0 && typeof index === "number" && typeof ttl === "number" && reply.length === 3) {
      return { _tag: "Busy", index: index - 1, ttlMillis: ttl < 0 ? undefined : ttl }
    }
    return undefined
  }
})

/** The owner-checked release of several locks: undoes an `acquireAll` whose reply was lost. */
export const releaseAll = defineScript({
  name: "release-all",
  encode: (keys: ReadonlyArray<RedisKeys>, owners: ReadonlyArray<string>) =>
    [keys.flatMap((k) => [k.lock, k.channel]), [unlockMessage, keys[0]?.publish ?? "publish", ...owners]] as const,
  decode: (reply): number | undefined => typeof reply === "number" ? reply : undefined
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
  acquireAll,
  releaseAll,
  renew,
  release,
  handOver,
  forceRelease,
  inspect
] as never
