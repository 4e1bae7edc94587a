/**
 * Replica sync (Redisson's `checkLockSyncedSlaves`): a write script followed by `WAIT n timeout`
 * (or `WAITAOF 0 n timeout`) on the same connection, in the same write, so that the operation's
 * answer says how many replicas had its effect when it returned. Redis replicates asynchronously;
 * a failover promotes a replica that may lack an acknowledged acquisition, and `WAIT` tells the
 * client which acquisitions are exposed to that. It does not make Redis strongly consistent: a
 * write `WAIT` counted can still be lost (the failover may pick another replica; a replica that
 * acknowledged may restart without it), and a write it did not count has still been done.
 *
 * `WAIT` counts the replicas that acknowledged this connection's latest write, so it must follow
 * the script on the very connection that ran it, before any other write of that connection (the
 * pair goes out in one write: `batch`). The connection answers nothing else until `WAIT` returns:
 * later commands queue behind it, which is the cost measured in docs/benchmarks.md.
 */
import { Effect, MetricLabel } from "effect"
import type { Redis } from "ioredis"
import type { BackendOperation } from "../../LockError.js"
import * as metrics from "../metrics.js"
import type { Connections } from "./connection.js"
import { backendName } from "./errors.js"
import type { Script } from "./scripts.js"

export interface ReplicaSync {
  /** Replicas that must confirm each write: a whole number, at least 1. */
  readonly replicas: number
  /** How long `WAIT` waits for them, in whole milliseconds, at least 1. */
  readonly timeoutMillis: number
  /** Ask for `WAITAOF 0 n timeout` (Redis 7.2+: replicas fsynced their AOF); `WAIT` where refused. */
  readonly aof: boolean
}

/** What a synced write learned: the replicas that confirmed it, and the command that asked. */
export interface Confirmation {
  readonly confirmed: number
  readonly command: "WAIT" | "WAITAOF"
}

const isNoScript = (error: unknown) => error instanceof Error && error.message.startsWith("NOSCRIPT")
const refusesWaitAof = (error: unknown) =>
  error instanceof Error && /unknown command|unknown subcommand|WAITAOF/i.test(error.message)

export interface SyncedSender {
  /**
   * Run `script`, then `WAIT`, in one write; `onReply` gets the script's reply and the replicas
   * that confirmed it (0 when `WAIT` itself failed: nothing is known to be replicated).
   */
  readonly run: <I extends ReadonlyArray<unknown>, A>(
    script: Script<I, A>,
    input: I,
    onReply: (reply: unknown, confirmation: Confirmation) => void,
    onError: (error: unknown) => void
  ) => void
}

export const makeSyncedSender = (
  command: Redis,
  sync: ReplicaSync,
  batch: () => void,
  runFork: <A, E>(effect: Effect.Effect<A, E>) => void
): SyncedSender => {
  // WAITAOF until the server refuses it once (Redis older than 7.2).
  let useAof = sync.aof
  const refusals = new Set<string>()
  const args = [String(sync.replicas), String(sync.timeoutMillis)]

  const wait = (onConfirmed: (confirmation: Confirmation) => void) => {
    if (useAof) {
      command.call("WAITAOF", "0", ...args).then(
        (reply) =>
          onConfirmed({
            confirmed: Array.isArray(reply) && typeof reply[1] === "number" ? reply[1] : 0,
            command: "WAITAOF"
          }),
        (error: unknown) => {
          if (useAof && refusesWaitAof(error)) {
            useAof = false
            runFork(
              Effect.logWarning(
                `Redis refused WAITAOF (${
                  error instanceof Error ? error.message : String(error)
                }); replica sync uses WAIT from now on`
              ).pipe(Effect.annotateLogs({ backend: "redis" }))
            )
            // The write ran and nothing else was written since on this connection's side of the
            // WAITAOF (it was answered at once): WAIT now, one round trip more, this once.
            return wait(onConfirmed)
          }
          onConfirmed({ confirmed: 0, command: "WAITAOF" })
        }
      )
    } else {
      command.call("WAIT", ...args).then(
        (reply) => onConfirmed({ confirmed: typeof reply === "number" ? reply : 0, command: "WAIT" }),
        (error: unknown) => {
          // A refusal (NOPERM, a replica's "WAIT cannot be used with replica instances") is worth
          // saying once per kind; a dropped connection is logged by the connection.
          if (error instanceof Error && error.name === "ReplyError" && !refusals.has(error.message)) {
            refusals.add(error.message)
            runFork(
              Effect.logWarning(`Redis refused WAIT (${error.message}); writes count as confirmed by no replica`)
                .pipe(Effect.annotateLogs({ backend: "redis" }))
            )
          }
          onConfirmed({ confirmed: 0, command: "WAIT" })
        }
      )
    }
  }

  const run = <I extends ReadonlyArray<unknown>, A>(
    script: Script<I, A>,
    input: I,
    onReply: (reply: unknown, confirmation: Confirmation) => void,
    onError: (error: unknown) => void
  ) => {
    const [keys, args] = script.encode(...input)
    // The script's outcome and the confirmation of the WAIT sent after it (replies come in order;
    // either way, both are needed to answer).
    let outcome: { readonly reply: unknown } | { readonly error: unknown } | undefined
    let confirmation: Confirmation | undefined
    let retried = false
    const settle = () => {
      if (outcome === undefined || confirmation === undefined) return
      if ("error" in outcome) onError(outcome.error)
      else onReply(outcome.reply, confirmation)
    }
    batch()
    command.evalsha(script.sha, keys.length, ...keys, ...args).then(
      (reply) => {
        outcome = { reply }
        settle()
      },
      (error: unknown) => {
        if (!isNoScript(error)) {
          outcome = { error }
          return settle()
        }
        // The script did not run (a new master that never saw SCRIPT LOAD): run its source, and
        // wait for the replicas again after it, since the WAIT already sent came before it.
        retried = true
        batch()
        command.eval(script.source, keys.length, ...keys, ...args).then(
          (reply) => wait((confirmed) => onReply(reply, confirmed)),
          onError
        )
      }
    )
    wait((confirmed) => {
      if (retried) return
      confirmation = confirmed
      settle()
    })
  }

  return { run }
}

/** Replica sync on the command path (`commands.ts`): how to send the writes, what to do when short. */
export interface CommandSync {
  readonly sender: SyncedSender
  readonly replicas: number
  readonly timeoutMillis: number
  /** A write that fewer than `replicas` confirmed: log and count it. */
  readonly short: (operation: BackendOperation, key: string, confirmation: Confirmation) => void
  /** A write that every replica asked for confirmed. */
  readonly confirmed: () => void
}

/** The replica-sync hook of a standalone (or Sentinel) command connection. */
export const makeCommandSync = (connections: Connections, command: Redis, sync: ReplicaSync): CommandSync => {
  // The first shortfall of a run is a warning, the next ones debug lines, until a write is fully
  // confirmed again (a replica down would otherwise log every single operation).
  let shortRun = false
  const labels = [MetricLabel.make("backend", backendName)]
  const byOperation = new Map<BackendOperation, ReadonlyArray<MetricLabel.MetricLabel>>()
  const labelsOf = (operation: BackendOperation) => {
    let found = byOperation.get(operation)
    if (found === undefined) byOperation.set(operation, found = [...labels, MetricLabel.make("operation", operation)])
    return found
  }
  return {
    sender: makeSyncedSender(command, sync, connections.batch, connections.runFork),
    replicas: sync.replicas,
    timeoutMillis: sync.timeoutMillis,
    short: (operation, key, { command, confirmed }) => {
      metrics.count(metrics.replicaSyncShortfalls, labelsOf(operation))
      const log = shortRun ? Effect.logDebug : Effect.logWarning
      shortRun = true
      connections.runFork(
        log(
          `Only ${confirmed} of ${sync.replicas} replica(s) confirmed a lock ${operation} within ${sync.timeoutMillis} ms (${command})`
        ).pipe(Effect.annotateLogs({ backend: backendName, key, operation, confirmed }))
      )
    },
    confirmed: () => {
      shortRun = false
    }
  }
}
