/** Errors of the Redis backend: typed, and with credentials taken out of whatever ioredis attached. */
import type { BackendOperation } from "../../LockError.js"
import { LockBackendError } from "../../LockError.js"

export const backendName = "redis"

// ioredis attaches the failed command to its errors, arguments included: for AUTH and HELLO those
// are the credentials, which must not travel on in an error that may be logged or serialised.
const redactCredentials = (cause: unknown): unknown => {
  if (!(cause instanceof Error) || !("command" in cause)) return cause
  const command = cause.command as { readonly name?: unknown } | undefined
  if (typeof command?.name !== "string" || !/^(auth|hello)$/i.test(command.name)) return cause
  const redacted = new Error(cause.message)
  redacted.name = cause.name
  return Object.assign(redacted, { command: { name: command.name, args: ["<redacted>"] } })
}

export const redisError = (operation: BackendOperation, key: string | undefined, cause: unknown): LockBackendError => {
  const safe = redactCredentials(cause)
  return new LockBackendError(
    key === undefined
      ? { backend: backendName, operation, cause: safe }
      : { backend: backendName, operation, key, cause: safe }
  )
}

export const unexpectedReply = (operation: BackendOperation, key: string | undefined, reply: unknown) =>
  redisError(operation, key, new Error(`unexpected reply ${JSON.stringify(reply)}`))

// Errors after which the command certainly did not run: it was never written (no connection and
// no offline queue), or the server answered it (a script error).
export const certainlyNotRun = (error: unknown): boolean =>
  error instanceof Error &&
  (error.name === "ReplyError" ||
    error.message.startsWith("Stream isn't writeable"))

export const messageOf = (error: unknown): string => error instanceof Error ? error.message : String(error)
