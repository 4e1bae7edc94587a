/**
 * Errors of the Redis backend: typed, with credentials taken out of whatever ioredis attached, and
 * with the two refusals a locked-down deployment meets said plainly: a TLS handshake that failed
 * over a certificate (naming the server), and an ACL permission the Redis user lacks (naming what
 * the operation needs).
 */
import type { BackendOperation } from "../../LockError.js"
import { LockBackendError } from "../../LockError.js"
import { needsOf } from "./acl.js"

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

// Redis' refusals for want of an ACL permission: `NOPERM ...` for a command sent by the client, and
// the script forms (Redis 7 names neither the command nor the key inside a script).
const permissionRefusal =
  /^NOPERM|can't run this command or subcommand|can't access at least one of the keys|can't publish to the channel/

/** Whether `cause` is Redis refusing a command for want of an ACL permission. */
export const isPermissionRefusal = (cause: unknown): boolean =>
  cause instanceof Error && permissionRefusal.test(cause.message)

// The refusal as it came, followed by what the operation needs. The name stays "ReplyError": the
// server answered, so the command certainly did not run past the refusal (`certainlyNotRun`).
const explainPermission = (operation: BackendOperation, cause: Error): Error => {
  const needs = needsOf(operation)
  const command = /run the '([^']+)' command/.exec(cause.message)?.[1]
  const error = new Error(
    `${cause.message} (the Redis user lacks an ACL permission${command === undefined ? "" : `: +${command}`}${
      needs === undefined ? "" : `; to ${operation} effect-lock needs ${needs}`
    }; grant the rule of RedisBackend.aclRule, see docs/redis.md)`,
    { cause }
  )
  error.name = cause.name
  return error
}

// A cluster client that could not load the slot map says so ("Failed to refresh slots cache.") and
// keeps the node's answer aside: a refused CLUSTER SLOTS is brought forward.
const slotsRefusal = (cause: unknown): unknown => {
  const last: unknown = cause instanceof Error && "lastNodeError" in cause ? cause.lastNodeError : undefined
  if (!(last instanceof Error) || !isPermissionRefusal(last)) return cause
  const error = new Error(last.message, { cause })
  error.name = last.name
  return error
}

export const redisError = (operation: BackendOperation, key: string | undefined, cause: unknown): LockBackendError => {
  const redacted = redactCredentials(slotsRefusal(cause))
  const safe = redacted instanceof Error && isPermissionRefusal(redacted)
    ? explainPermission(operation, redacted)
    : redacted
  return new LockBackendError(
    key === undefined
      ? { backend: backendName, operation, cause: safe }
      : { backend: backendName, operation, key, cause: safe }
  )
}

export const unexpectedReply = (operation: BackendOperation, key: string | undefined, reply: unknown) =>
  redisError(operation, key, new Error(`unexpected reply ${JSON.stringify(reply)}`))

/** Where a connection goes, for messages. */
export interface Endpoint {
  readonly host: string
  readonly port: number
  /** Whether the connection speaks TLS. */
  readonly tls: boolean
}

const codeOf = (error: Error): string => {
  const code = (error as { readonly code?: unknown }).code
  return typeof code === "string" ? code : ""
}

/**
 * A connection error, said plainly when it is a TLS refusal over a certificate (Node's error
 * codes: `SELF_SIGNED_CERT_IN_CHAIN`, `UNABLE_TO_VERIFY_LEAF_SIGNATURE`, `CERT_HAS_EXPIRED`,
 * `ERR_TLS_CERT_ALTNAME_INVALID`, OpenSSL alerts from the server, ...), or a TLS connection reset
 * before it was ever ready. Other errors pass as they are.
 */
export const describeConnectionError = (error: Error, endpoint: Endpoint, neverReady: boolean): Error => {
  const code = codeOf(error)
  const server = endpoint.port === 0 ? endpoint.host : `${endpoint.host}:${endpoint.port}`
  const reason = `${error.message}${code === "" || error.message.includes(code) ? "" : ` (${code})`}`
  let text: string | undefined
  if (/CERTIFICATE_REQUIRED/.test(code)) {
    text =
      `TLS handshake with ${server} failed: the server requires a client certificate (give one as tls.cert and tls.key): ${reason}`
  } else if (/BAD_CERTIFICATE|UNKNOWN_CA|CERTIFICATE_UNKNOWN|CERTIFICATE_EXPIRED|CERTIFICATE_REVOKED/.test(code)) {
    text = `TLS handshake with ${server} failed: the server refused the client certificate: ${reason}`
  } else if (code === "ERR_TLS_CERT_ALTNAME_INVALID") {
    text =
      `TLS handshake with ${server} failed: the server's certificate is not for this host (connect by a name it lists, or set tls.servername): ${reason}`
  } else if (/CERT|SELF_SIGNED|UNABLE_TO_(GET|VERIFY)|ERR_SSL|ERR_TLS/.test(code)) {
    text =
      `TLS handshake with ${server} failed: the server's certificate was not accepted (give the CA that signed it as tls.ca): ${reason}`
  } else if (endpoint.tls && neverReady && (code === "ECONNRESET" || code === "EPIPE")) {
    // TLS 1.3: the client finishes its side of the handshake before the server has checked the
    // client's certificate, so a refusal can arrive as a reset of the first write instead of an alert.
    text =
      `TLS connection to ${server} was reset during setup: if the server requires a client certificate (tls-auth-clients), give one as tls.cert and tls.key: ${reason}`
  }
  if (text === undefined) return error
  const described = new Error(text, { cause: error })
  described.name = "TlsError"
  return described
}

// Errors after which the command certainly did not run: it was never written (no connection and
// no offline queue), or the server answered it (a script error).
export const certainlyNotRun = (error: unknown): boolean =>
  error instanceof Error &&
  (error.name === "ReplyError" ||
    error.message.startsWith("Stream isn't writeable"))

export const messageOf = (error: unknown): string => error instanceof Error ? error.message : String(error)
