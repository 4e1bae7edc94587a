/**
 * Locks for promise code: an Express or Fastify handler, a queue consumer, any `async` function.
 * A client owns a runtime built from a backend layer; `using` runs an async function while the
 * lock is held and settles like any promise API:
 *
 * - it resolves with the function's result;
 * - it rejects with the lock's own error classes (`LockTimeoutError`, `LockLostError`,
 *   `LockBackendError`, `LockOptionsError`: `instanceof` works and `_tag` is set), or with exactly
 *   what the function threw;
 * - the `AbortSignal` it passes is aborted when the lock is lost (or the client closes): pass it on
 *   to `fetch`, database drivers and timers, and stop writing when it fires;
 * - it waits at most 10 seconds for the lock unless `wait` says otherwise (`DEFAULT_WAIT`).
 *
 * `close()` releases every lock the client holds (their functions' signals abort) and closes the
 * backend's connections: call it on shutdown (see docs/shutdown.md).
 *
 * ```ts
 * import { LockClient, MemoryBackend } from "effect-lock"
 *
 * const locks = LockClient.make(MemoryBackend.layer)
 * const total = await locks.using("orders:42", { wait: "2 seconds" }, async (signal, lease) => {
 *   return lease.fencingToken
 * })
 * await locks.close()
 * ```
 *
 * @since 0.2.0
 */
import type { Layer } from "effect"
import { Cause, Data, Effect, Exit, ManagedRuntime, Option } from "effect"
import type { Lease, LockOptions } from "./Lock.js"
import { withLock } from "./Lock.js"
import type { LockBackend } from "./LockBackend.js"

/**
 * A promise-facing lock client.
 *
 * @since 0.2.0
 * @category models
 */
export interface LockClient {
  /**
   * Run `body` while holding the lock on `key`, waiting as `options` allow. Resolves with what
   * `body` resolves with; rejects with a lock error or with what `body` threw.
   */
  readonly using: {
    <A>(key: string, body: (signal: AbortSignal, lease: Lease) => Promise<A>): Promise<A>
    <A>(
      key: string,
      options: LockOptions | undefined,
      body: (signal: AbortSignal, lease: Lease) => Promise<A>
    ): Promise<A>
  }
  /** Release every lock held through this client, then close the backend. Idempotent. */
  readonly close: () => Promise<void>
}

/**
 * How long `using` waits for a lock unless told otherwise (`wait: Infinity` waits without limit):
 * a promise cannot be interrupted, so an unlimited default would hang a request on a busy key.
 *
 * @since 0.2.0
 * @category options
 */
export const DEFAULT_WAIT = "10 seconds"

const defaults: LockOptions = { wait: DEFAULT_WAIT }
// The same options object for the same given one: validated options are cached by identity.
const derived = new WeakMap<LockOptions, LockOptions>()

/** A promise cannot be interrupted: waiting is bounded unless the options say otherwise. */
const withDefaultWait = (given: LockOptions | undefined): LockOptions => {
  if (given === undefined) return defaults
  if (given.wait !== undefined) return given
  let options = derived.get(given)
  if (options === undefined) {
    options = { ...given, wait: DEFAULT_WAIT }
    derived.set(given, options)
  }
  return options
}

/** What `body` threw, carried through the Effect so that it can be rethrown as it was. */
class BodyRejected extends Data.TaggedError("BodyRejected")<{ readonly thrown: unknown }> {}

/**
 * The reason a `using` call rejects with when its work was interrupted without a lock error (the
 * client was closed meanwhile): a `DOMException` named `AbortError`, as `fetch` and Node's
 * timers reject with.
 */
const aborted = () => new DOMException("The lock's work was interrupted: the client is closing", "AbortError")

const settle = <A>(exit: Exit.Exit<A, unknown>): Promise<A> => {
  if (Exit.isSuccess(exit)) return Promise.resolve(exit.value)
  const failure = Cause.failureOption(exit.cause)
  if (Option.isSome(failure)) {
    const error = failure.value
    return Promise.reject(error instanceof BodyRejected ? error.thrown : error)
  }
  if (Cause.isInterruptedOnly(exit.cause)) return Promise.reject(aborted())
  return Promise.reject(Cause.squash(exit.cause))
}

/**
 * A client over `layer` (say `RedisBackend.layer({ url })` or `MemoryBackend.layer`). The layer is
 * built on first use; a layer that fails to build (Redis unreachable) makes each call reject with
 * its error.
 *
 * @since 0.2.0
 * @category constructors
 */
export const make = <E>(layer: Layer.Layer<LockBackend, E>): LockClient => {
  const runtime = ManagedRuntime.make(layer)
  let closing: Promise<void> | undefined
  const using = <A>(
    key: string,
    optionsOrBody: LockOptions | undefined | ((signal: AbortSignal, lease: Lease) => Promise<A>),
    maybeBody?: (signal: AbortSignal, lease: Lease) => Promise<A>
  ): Promise<A> => {
    const body = typeof optionsOrBody === "function" ? optionsOrBody : maybeBody
    const given = typeof optionsOrBody === "function" ? undefined : optionsOrBody
    const options = withDefaultWait(given)
    if (body === undefined) return Promise.reject(new TypeError("LockClient.using needs an async function to run"))
    if (closing !== undefined) return Promise.reject(aborted())
    const program = withLock(
      key,
      (lease: Lease) =>
        Effect.tryPromise({
          try: (signal) => body(signal, lease),
          catch: (thrown) => new BodyRejected({ thrown })
        }),
      options
    )
    return runtime.runPromiseExit(program).then(settle)
  }
  return {
    using: using as LockClient["using"],
    close: () => closing ??= runtime.dispose()
  }
}
