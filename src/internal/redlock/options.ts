/** Checking `RedlockBackend` options before anything connects. */
import { Duration, Effect, Option } from "effect"
import { LockOptionsError } from "../../LockError.js"

const defaultCommandTimeout = Duration.millis(500)

export const validateOptions = (options: {
  readonly nodes: ReadonlyArray<unknown>
  readonly commandTimeout?: Duration.DurationInput | undefined
}): Effect.Effect<{ readonly commandTimeout: number }, LockOptionsError> => {
  const fail = (field: string, reason: string) => Effect.fail(new LockOptionsError({ field, reason }))
  if (!Array.isArray(options.nodes) || options.nodes.length === 0) {
    return fail("nodes", "needs at least one node (3 or 5 independent masters is what Redlock is for)")
  }
  if (options.nodes.some((node) => node === undefined || node === null || node === "")) {
    return fail("nodes", "every node must be a URL, ioredis options or an ioredis client")
  }
  const input = options.commandTimeout ?? defaultCommandTimeout
  const decoded = Duration.decodeUnknown(input)
  if (Option.isNone(decoded)) return fail("commandTimeout", `is not a duration: ${String(input)}`)
  const millis = Duration.toMillis(decoded.value)
  if (!Number.isFinite(millis) || millis < 1) {
    return fail("commandTimeout", `must be finite and at least 1 ms, got ${String(input)}`)
  }
  if (!Number.isInteger(millis)) {
    return fail("commandTimeout", `must be a whole number of milliseconds, got ${millis} ms`)
  }
  return Effect.succeed({ commandTimeout: millis })
}
