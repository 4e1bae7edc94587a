/**
 * The semaphore's scripts (`lua/semaphore-*.lua`, RedissonPermitExpirableSemaphore's layout), each
 * with its typed input and its decoded reply. The Lua files say what each returns.
 */
import type { PermitAcquireResult, PermitRequest, SemaphoreState } from "../semaphore/primitives.js"
import type { SemaphoreKeys } from "./keys.js"
import { decodeRenewals } from "./lockScripts.js"
import type { Script } from "./scripts.js"
import { defineScript } from "./scripts.js"

const isToken = (value: unknown): value is string => typeof value === "string" && /^\d+$/.test(value)

export const acquire = defineScript({
  name: "semaphore-acquire",
  encode: (keys: SemaphoreKeys, request: PermitRequest) =>
    [
      [keys.semaphore, keys.timeouts, keys.channel, keys.token],
      [
        String(request.permits),
        String(request.leaseMillis),
        request.owner,
        request.fencing ? "1" : "0",
        request.total === undefined ? "" : String(request.total),
        keys.publish
      ]
    ] as const,
  decode: (reply): PermitAcquireResult | undefined => {
    if (!Array.isArray(reply)) return undefined
    const [status, value, ttl] = reply as [unknown, unknown, unknown]
    if (status === 1 && isToken(value)) return { _tag: "Acquired", fencingToken: BigInt(value) }
    if (status === 0 && typeof value === "number" && typeof ttl === "number") {
      return { _tag: "Busy", available: value, ttlMillis: ttl < 0 ? undefined : ttl }
    }
    return undefined
  }
})

export const renew = defineScript({
  name: "semaphore-renew",
  encode: (timeouts: ReadonlyArray<string>, requests: ReadonlyArray<PermitRequest>) =>
    [timeouts, requests.flatMap((r) => [String(r.leaseMillis), r.owner, String(r.permits)])] as const,
  decode: decodeRenewals
})

export const release = defineScript({
  name: "semaphore-release",
  encode: (keys: SemaphoreKeys, owner: string, permits: number) =>
    [[keys.semaphore, keys.timeouts, keys.channel], [owner, String(permits), keys.publish]] as const,
  decode: (reply): number | undefined => typeof reply === "number" && reply >= 0 ? reply : undefined
})

export const state = defineScript({
  name: "semaphore-state",
  encode: (keys: SemaphoreKeys) => [[keys.semaphore, keys.timeouts, keys.channel], [keys.publish]] as const,
  decode: (reply): SemaphoreState | undefined => {
    if (!Array.isArray(reply)) return undefined
    const [available, acquired] = reply as [unknown, unknown]
    return typeof available === "number" && typeof acquired === "number" ? { available, acquired } : undefined
  }
})

export const setPermits = defineScript({
  name: "semaphore-set-permits",
  encode: (keys: SemaphoreKeys, total: number) =>
    [[keys.semaphore, keys.timeouts, keys.channel], [String(total), keys.publish]] as const,
  decode: (reply): number | undefined => typeof reply === "number" ? reply : undefined
})

export const all: ReadonlyArray<Script<never, unknown>> = [acquire, renew, release, state, setPermits] as never
