/**
 * Running scripts on the command connection, within the command budget, and undoing an
 * acquisition whose reply was lost.
 *
 * Replica sync (`replicaSync.ts`, the backend's `replicas` option) lives here too, so that every
 * lock kind gets it from the same calls: `call` with operation `renew`, `release` or
 * `force-release`, and every `callTaking`/`callTakingWith` (acquisitions), are followed by `WAIT`
 * on the same connection in the same write. A shortfall is logged and counted; an acquisition
 * that no replica confirmed is undone with the call's `undo` (owner checked, as for a lost reply)
 * and fails. A lock kind gets this by sending its writes through these calls with these
 * operations; a kind whose hold the plain release cannot undo passes its `undo` to `callTakingWith`.
 */
import { Effect, Either } from "effect"
import type { LockRequest } from "../../LockBackend.js"
import type { BackendOperation, LockBackendError } from "../../LockError.js"
import { LockReplicaSyncError } from "../../LockError.js"
import type { Connections, Outcome, Send } from "./connection.js"
import { backendName, certainlyNotRun, messageOf, redisError, unexpectedReply } from "./errors.js"
import type { KeyLayout } from "./keys.js"
import * as scripts from "./lockScripts.js"
import type { CommandSync, Confirmation } from "./replicaSync.js"
import type { Script } from "./scripts.js"
import { runScript } from "./scripts.js"

export interface Commands {
  /** Run `script` once, within the command budget; its reply decoded. */
  readonly call: <I extends ReadonlyArray<unknown>, A>(
    operation: BackendOperation,
    key: string,
    script: Script<I, A>,
    ...input: I
  ) => Effect.Effect<A, LockBackendError>
  /**
   * A call that may take the lock for `request.owner`. If it may have run but its reply is lost or
   * comes too late for the caller (`took` says whether it took the lock), that hold is released
   * again, owner checked.
   */
  readonly callTaking: <I extends ReadonlyArray<unknown>, A>(
    operation: BackendOperation,
    request: LockRequest,
    took: (result: A) => boolean,
    script: Script<I, A>,
    ...input: I
  ) => Effect.Effect<A, LockBackendError>
  /**
   * `callTaking` for a kind whose hold is not the plain lock's: `undo` is the owner-checked
   * release script (and its input) that cancels the call's hold when its reply is lost.
   */
  readonly callTakingWith: <J extends ReadonlyArray<unknown>, I extends ReadonlyArray<unknown>, A>(
    undo: Undo<J>,
    operation: BackendOperation,
    request: LockRequest,
    took: (result: A) => boolean,
    script: Script<I, A>,
    ...input: I
  ) => Effect.Effect<A, LockBackendError>
  /**
   * `call` and `callTaking` by callbacks (`Connections.start`): `done` gets the outcome; the
   * returned function, when there is one, stops waiting as an interrupted caller would (an
   * acquisition in flight is then compensated).
   */
  readonly start: {
    readonly call: <I extends ReadonlyArray<unknown>, A>(
      operation: BackendOperation,
      key: string,
      script: Script<I, A>,
      input: I,
      done: (result: Outcome<A>) => void
    ) => (() => void) | undefined
    readonly callTaking: <I extends ReadonlyArray<unknown>, A>(
      operation: BackendOperation,
      request: LockRequest,
      took: (result: A) => boolean,
      script: Script<I, A>,
      input: I,
      done: (result: Outcome<A>) => void
    ) => (() => void) | undefined
  }
  /** Replica sync, when the backend has it on. */
  readonly sync: CommandSync | undefined
}

/** The writes that `call` follows with `WAIT` under replica sync (acquisitions go through `callTaking`). */
const syncedCalls: ReadonlySet<BackendOperation> = new Set(["renew", "release", "force-release"])

/** A release script and its input; its reply is -1 when there was nothing to release. */
export interface Undo<J extends ReadonlyArray<unknown>> {
  readonly script: Script<J, unknown>
  readonly input: J
}

export const makeCommands = (connections: Connections, layout: KeyLayout, sync?: CommandSync): Commands => {
  const { batch, budgeted, command, runFork } = connections

  /** Run a script on the command connection, its write batched with the others of this turn. */
  const send = <I extends ReadonlyArray<unknown>, A>(
    script: Script<I, A>,
    input: I,
    onReply: (reply: unknown) => void,
    onError: (error: unknown) => void
  ) => {
    batch()
    runScript(command, script, input, onReply, onError)
  }

  /** `send`, followed by `WAIT` when `synced` and replica sync is on (`confirmation`: its answer). */
  const sendWrite = <I extends ReadonlyArray<unknown>, A>(
    synced: boolean,
    script: Script<I, A>,
    input: I,
    onReply: (reply: unknown, confirmation: Confirmation | undefined) => void,
    onError: (error: unknown) => void
  ) => {
    if (sync === undefined || !synced) return send(script, input, (reply) => onReply(reply, undefined), onError)
    sync.sender.run(script, input, onReply, onError)
  }

  const checkShort = (operation: BackendOperation, key: string, confirmation: Confirmation | undefined) => {
    if (sync === undefined || confirmation === undefined) return
    if (confirmation.confirmed < sync.replicas) sync.short(operation, key, confirmation)
    else sync.confirmed()
  }

  /** What `call` sends. */
  const plainCall = <I extends ReadonlyArray<unknown>, A>(
    operation: BackendOperation,
    key: string,
    script: Script<I, A>,
    input: I
  ): Send<A> =>
  (settle) => {
    sendWrite(syncedCalls.has(operation), script, input, (reply, confirmation) => {
      const value = script.decode(reply)
      if (value !== undefined) checkShort(operation, key, confirmation)
      settle(value === undefined ? Either.left(unexpectedReply(operation, key, reply)) : Either.right(value))
    }, (cause) => settle(Either.left(redisError(operation, key, cause))))
  }

  // The acquiring script may have run although its reply never reached the caller (a command
  // timeout, a dropped connection, an interrupted caller). Its hold is then released here, owner
  // checked, and ordered right after the acquire: at once on the same connection, or, when that
  // connection dropped, as the very first command once it is back (written from the "ready"
  // handler, before any waiting call resumes). The acquire is never resent, so it ran before the
  // drop or not at all, and no other command of this backend gets in between. The release
  // decrements, so it can only ever cancel that one acquire, never a hold the owner takes later.
  const compensate = <J extends ReadonlyArray<unknown>>(
    request: LockRequest,
    why: string,
    undo: Undo<J> | undefined,
    done = "Released a lock taken by an acquire whose reply was lost"
  ) => {
    const annotate = Effect.annotateLogs({ backend: backendName, key: request.key, owner: request.owner, why })
    const released = (reply: unknown) => {
      if (reply !== -1) runFork(annotate(Effect.logWarning(done)))
    }
    const noReply = (error: unknown) =>
      runFork(annotate(
        Effect.logWarning(
          "A compensating release for an acquire whose reply was lost got no reply either; " +
            "if the acquire took the lock, the lock ends with its lease"
        ).pipe(Effect.annotateLogs("error", messageOf(error)))
      ))
    connections.whenConnected(
      () =>
        undo === undefined
          ? send(scripts.release, [layout.keysOf(request.key), request.owner], released, noReply)
          : send(undo.script, undo.input, released, noReply),
      () => noReply(new Error("the connection is closed"))
    )
  }

  /** What `callTakingWith` sends. */
  const takingCall = <J extends ReadonlyArray<unknown>, I extends ReadonlyArray<unknown>, A>(
    undo: Undo<J> | undefined,
    operation: BackendOperation,
    request: LockRequest,
    took: (result: A) => boolean,
    script: Script<I, A>,
    input: I
  ): Send<A> =>
  (settle) => {
    let abandoned = false
    let settled = false
    sendWrite(true, script, input, (reply, confirmation) => {
      settled = true
      const result = script.decode(reply)
      if (sync !== undefined && confirmation !== undefined && result !== undefined && took(result)) {
        if (confirmation.confirmed === 0) {
          // No replica has this acquisition: a failover now would hand the lock to someone
          // else while this caller believes it holds it. Undo it, and fail.
          sync.short(operation, request.key, confirmation)
          compensate(
            request,
            "no replica confirmed the acquisition",
            undo,
            "Released a lock taken by an acquire that no replica confirmed"
          )
          if (!abandoned) {
            settle(Either.left(redisError(
              operation,
              request.key,
              new LockReplicaSyncError({
                key: request.key,
                required: sync.replicas,
                confirmed: confirmation.confirmed,
                timeoutMillis: sync.timeoutMillis,
                command: confirmation.command
              })
            )))
          }
          return
        }
        checkShort(operation, request.key, confirmation)
      }
      if (!abandoned) {
        settle(
          result === undefined
            ? Either.left(unexpectedReply(operation, request.key, reply))
            : Either.right(result)
        )
      } else if (result !== undefined && took(result)) {
        compensate(request, "caller interrupted", undo)
      }
    }, (cause) => {
      settled = true
      if (!certainlyNotRun(cause)) compensate(request, messageOf(cause), undo)
      if (!abandoned) settle(Either.left(redisError(operation, request.key, cause)))
    })
    // Abandoned while the script is in flight (the caller interrupted, or the budget ran out):
    // whatever it turns out to have done must not outlive this caller.
    return () => {
      if (!settled) abandoned = true
    }
  }

  return {
    call: (operation, key, script, ...input) => budgeted(operation, key, plainCall(operation, key, script, input)),
    callTaking: (operation, request, took, script, ...input) =>
      budgeted(operation, request.key, takingCall(undefined, operation, request, took, script, input)),
    callTakingWith: (undo, operation, request, took, script, ...input) =>
      budgeted(operation, request.key, takingCall(undo, operation, request, took, script, input)),
    start: {
      call: (operation, key, script, input, done) =>
        connections.start(operation, key, plainCall(operation, key, script, input), done),
      callTaking: (operation, request, took, script, input, done) =>
        connections.start(operation, request.key, takingCall(undefined, operation, request, took, script, input), done)
    },
    sync
  }
}
