/**
 * Validation of keys and options. Everything is checked before a backend is touched; a bad value
 * yields a `LockOptionsError` naming the field.
 */
import { Duration, Effect, Schedule } from "effect"
import * as ScheduleDecision from "effect/ScheduleDecision"
import type { BusyInfo, LockOptions } from "../../Lock.js"
import { LockOptionsError } from "../../LockError.js"

/** Options after validation, in milliseconds. */
export interface ResolvedOptions {
  readonly leaseMillis: number
  /** 0 when renewal is off. */
  readonly renewMillis: number
  /** `Infinity` when unbounded. */
  readonly waitMillis: number
  readonly retry: Schedule.Schedule<unknown, BusyInfo>
  readonly fencing: boolean
  /** Safety margin subtracted from the local deadline: 1% of the lease + 2 ms. */
  readonly driftMillis: number
}

/** Keys longer than this (in UTF-8 bytes) are refused. */
export const MAX_KEY_BYTES = 4096

/** The longest lease: the longest timer JavaScript runs, and well inside Redis' `PEXPIRE` range. */
export const MAX_LEASE_MILLIS = 2 ** 31 - 1

export const defaultRetry: Schedule.Schedule<unknown, BusyInfo> = Schedule.exponential("20 millis", 2).pipe(
  Schedule.either(Schedule.spaced("1 second")),
  Schedule.jittered
)

const DEFAULT_LEASE_MILLIS = 30_000

const keyProblem = (reason: string) => new LockOptionsError({ field: "key", reason })

// A high surrogate not followed by a low one, or a low one not preceded by a high one.
const loneSurrogate = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/

/** Why `key` is refused, or `undefined` when it is a valid key. */
export const keyError = (key: unknown): LockOptionsError | undefined => {
  if (typeof key !== "string") return keyProblem(`must be a string, got ${typeof key}`)
  if (key.length === 0) return keyProblem("must not be empty")
  // UTF-8 has no encoding for a lone surrogate: such keys would all become one Redis key (U+FFFD).
  const lone = loneSurrogate.exec(key)
  if (lone !== null) {
    return keyProblem(
      `is not well-formed UTF-16: a lone surrogate (\\u${
        lone[0].charCodeAt(0).toString(16)
      }) at index ${lone.index}, e.g. a string cut in the middle of an emoji`
    )
  }
  // Only a key that may be too long is measured: a UTF-16 unit is at most 3 bytes of UTF-8.
  const bytes = key.length * 3 <= MAX_KEY_BYTES ? 0 : Buffer.byteLength(key, "utf8")
  if (bytes > MAX_KEY_BYTES) return keyProblem(`is ${bytes} bytes long; the limit is ${MAX_KEY_BYTES} bytes`)
  return undefined
}

export const validateKey = (key: unknown): Effect.Effect<string, LockOptionsError> => {
  const error = keyError(key)
  return error === undefined ? Effect.succeed(key as string) : Effect.fail(error)
}

/** `keyError`, then whatever `backend` itself refuses (`LockPrimitives.checkKey`). */
export const keyErrorFor = (
  backend: { readonly primitives: { readonly checkKey?: ((key: string) => string | undefined) | undefined } },
  key: unknown
): LockOptionsError | undefined => {
  const error = keyError(key)
  if (error !== undefined) return error
  const problem = backend.primitives.checkKey?.(key as string)
  return problem === undefined ? undefined : keyProblem(problem)
}

/**
 * `validateKey`, then whatever the backend itself refuses (`LockPrimitives.checkKey`: a Redis
 * Cluster refuses names whose companion keys would land in another slot). Every public entry
 * point that takes a key on a backend checks it with this before sending anything.
 */
export const validateKeyFor = (
  backend: { readonly primitives: { readonly checkKey?: ((key: string) => string | undefined) | undefined } },
  key: unknown
): Effect.Effect<string, LockOptionsError> => {
  const error = keyErrorFor(backend, key)
  return error === undefined ? Effect.succeed(key as string) : Effect.fail(error)
}

const isNegativeInput = (input: unknown): boolean => {
  if (typeof input === "number") return input < 0
  if (typeof input === "bigint") return input < 0n
  if (typeof input === "string") return input.trim().startsWith("-")
  if (Array.isArray(input)) return input.some((n) => typeof n === "number" && n < 0)
  return false
}

/**
 * Parse a duration input to whole milliseconds, refusing NaN, negatives, fractions of a millisecond,
 * and (unless allowed) zero and infinity.
 */
const toMillis = (
  field: string,
  input: unknown,
  allow: { readonly zero: boolean; readonly infinite: boolean; readonly max: number }
): Effect.Effect<number, LockOptionsError> => {
  const fail = (reason: string) => Effect.fail(new LockOptionsError({ field, reason }))
  if (typeof input === "number" && Number.isNaN(input)) return fail("must be a number of milliseconds, got NaN")
  if (isNegativeInput(input)) return fail(`must not be negative, got ${String(input)}`)
  const decoded = Duration.decodeUnknown(input)
  if (decoded._tag === "None") return fail(`is not a duration: ${String(input)}`)
  const millis = Duration.toMillis(decoded.value)
  if (!Number.isFinite(millis)) return allow.infinite ? Effect.succeed(Infinity) : fail("must be finite")
  if (millis === 0 && !allow.zero) return fail(`must be positive, got ${String(input)}`)
  if (!Number.isInteger(millis)) {
    return fail(`must be a whole number of milliseconds, got ${millis} ms (${String(input)})`)
  }
  if (millis > allow.max) return fail(`must be at most ${allow.max} ms, got ${millis} ms`)
  return Effect.succeed(millis)
}

/** A schedule that refuses its very first step would stop every waiter at once. */
const checkRecurs = (
  retry: Schedule.Schedule<unknown, BusyInfo>
): Effect.Effect<Schedule.Schedule<unknown, BusyInfo>, LockOptionsError> => {
  if (!Schedule.isSchedule(retry)) {
    return Effect.fail(new LockOptionsError({ field: "retry", reason: "must be a Schedule" }))
  }
  const input: BusyInfo = { key: "", attempt: 1, holderTtlMillis: undefined }
  return retry.step(0, input, retry.initial).pipe(
    Effect.flatMap(([, , decision]) =>
      ScheduleDecision.isDone(decision)
        ? Effect.fail(new LockOptionsError({ field: "retry", reason: "the schedule never recurs" }))
        : Effect.succeed(retry)
    )
  )
}

/** The safety margin subtracted from the local deadline: 1 % of the lease + 2 ms. */
export const driftOf = (leaseMillis: number): number => Math.floor(leaseMillis * 0.01) + 2

/** The longest renew period that leaves a renewal one drift margin before the local deadline. */
export const maxRenewOf = (leaseMillis: number): number => leaseMillis - 2 * driftOf(leaseMillis)

const cache = new WeakMap<LockOptions, ResolvedOptions>()
let defaults: ResolvedOptions | undefined

/** The options resolved before (every call after the first with the same options object), or `undefined`. */
export const resolvedBefore = (options: LockOptions | undefined): ResolvedOptions | undefined =>
  options === undefined ? defaults : cache.get(options)

export const resolveOptions = (options: LockOptions | undefined): Effect.Effect<ResolvedOptions, LockOptionsError> => {
  if (options === undefined) {
    return defaults === undefined
      ? Effect.tap(resolveUncached({}), (resolved) => Effect.sync(() => defaults = resolved))
      : Effect.succeed(defaults)
  }
  const cached = cache.get(options)
  return cached !== undefined
    ? Effect.succeed(cached)
    : Effect.tap(resolveUncached(options), (resolved) => Effect.sync(() => cache.set(options, resolved)))
}

const resolveUncached = (options: LockOptions): Effect.Effect<ResolvedOptions, LockOptionsError> =>
  Effect.gen(function*() {
    if (typeof options !== "object" || options === null) {
      return yield* new LockOptionsError({ field: "options", reason: "must be an object" })
    }
    const leaseMillis = options.lease === undefined
      ? DEFAULT_LEASE_MILLIS
      : yield* toMillis("lease", options.lease, { zero: false, infinite: false, max: MAX_LEASE_MILLIS })
    const driftMillis = driftOf(leaseMillis)
    if (driftMillis >= leaseMillis) {
      return yield* new LockOptionsError({
        field: "lease",
        reason: `must be longer than the clock-drift margin (${driftMillis} ms)`
      })
    }
    const maxRenew = maxRenewOf(leaseMillis)
    let renewMillis: number
    if (options.renew === undefined || options.renew === true) {
      renewMillis = Math.max(1, Math.floor(leaseMillis / 3))
      if (renewMillis > maxRenew) {
        return yield* new LockOptionsError({
          field: "lease",
          reason: `${leaseMillis} ms is too short to renew (a renewal must come due ${driftMillis} ms before ` +
            `the local deadline at ${leaseMillis - driftMillis} ms): use a longer lease, or renew: false`
        })
      }
    } else if (options.renew === false) {
      renewMillis = 0
    } else {
      renewMillis = yield* toMillis("renew", options.renew, { zero: false, infinite: false, max: MAX_LEASE_MILLIS })
      if (renewMillis > maxRenew) {
        return yield* new LockOptionsError({
          field: "renew",
          reason: `the renewal period (${renewMillis} ms) must be at most the lease minus twice the drift margin ` +
            `(${leaseMillis} - 2 × ${driftMillis} = ${maxRenew} ms), so that a renewal comes due before the local deadline`
        })
      }
    }
    const waitMillis = options.wait === undefined
      ? Infinity
      : yield* toMillis("wait", options.wait, { zero: true, infinite: true, max: Number.MAX_SAFE_INTEGER })
    const retry = options.retry === undefined ? defaultRetry : yield* checkRecurs(options.retry)
    if (options.fencing !== undefined && typeof options.fencing !== "boolean") {
      return yield* new LockOptionsError({ field: "fencing", reason: "must be a boolean" })
    }
    return {
      leaseMillis,
      renewMillis,
      waitMillis,
      retry,
      fencing: options.fencing ?? true,
      driftMillis
    }
  })
