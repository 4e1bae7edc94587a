/**
 * The startup check of the ACL user's permissions (see `acl.ts`): one script round trip that
 * fails the backend with a `LockBackendError` naming each missing part of the rule.
 */
import { Effect } from "effect"
import type { Cluster, Redis } from "ioredis"
import type { LockBackendError } from "../../LockError.js"
import type { ConnectionHabits } from "./acl.js"
import { checkPermissions, missingPermissions, questionsFor } from "./acl.js"
import { isPermissionRefusal, redisError, unexpectedReply } from "./errors.js"
import type { ScriptClient } from "./scripts.js"
import { runScript } from "./scripts.js"

/** The `RedisBackend.aclRule(...)` call that gives the rule for these habits, for messages. */
const ruleCall = (prefix: string, habits: ConnectionHabits): string => {
  const options = [
    `prefix: ${JSON.stringify(prefix)}`,
    ...(habits.cluster === undefined ? [] : ["cluster: true"]),
    ...(habits.replicas === undefined ? [] : [`replicas: ${habits.replicas === "aof" ? "\"aof\"" : "true"}`])
  ]
  return `RedisBackend.aclRule({ ${options.join(", ")} })`
}

/**
 * Ask `client` (one server; on a cluster, one master, named by `node` in the message) whether the
 * user has every part of the rule.
 */
export const verifyPermissions = (
  client: ScriptClient,
  prefix: string,
  habits: ConnectionHabits,
  node?: string
): Effect.Effect<void, LockBackendError> => {
  const questions = questionsFor(prefix, habits)
  return Effect.async<ReadonlyArray<number>, LockBackendError>((resume) => {
    runScript(client, checkPermissions, [questions], (reply) => {
      const answers = checkPermissions.decode(reply)
      resume(
        answers === undefined
          ? Effect.fail(unexpectedReply("check-permissions", undefined, reply))
          : Effect.succeed(answers)
      )
    }, (cause) => resume(Effect.fail(redisError("check-permissions", undefined, cause))))
  }).pipe(
    Effect.flatMap((answers) => {
      const missing = missingPermissions(questions, answers)
      if (missing.length === 0) return Effect.void
      const error = new Error(
        `the Redis user${node === undefined ? "" : ` on ${node}`} lacks ACL permissions effect-lock needs: ` +
          `${missing.join(", ")} (grant the rule of ${ruleCall(prefix, habits)}` +
          `${habits.cluster === undefined ? "" : " on every node"}, see docs/redis.md)`
      )
      error.name = "AclError"
      return Effect.fail(redisError("check-permissions", undefined, error))
    })
  )
}

/**
 * ioredis' cluster client retries its ready check (`CLUSTER INFO`) for ever when the user may not
 * run it, so connecting would hang without a word. Raced against connecting: when the client
 * drops its connections after loading the slot map and before being ready (what a failed ready
 * check does), it asks a master `CLUSTER INFO` itself, on a connection of its own, and fails with
 * the refusal, which names `+cluster|info`. A connect that goes well opens nothing more; this
 * never ends on its own.
 */
export const clusterReadyCheckRefused = (cluster: Cluster): Effect.Effect<never, Error> =>
  cluster.options.enableReadyCheck === false
    ? Effect.never
    : Effect.async<never, Error>((resume) => {
      let master: Redis | undefined
      let probe: Redis | undefined
      const onRefresh = () => {
        master = cluster.nodes("master")[0] ?? master
      }
      const onClose = () => {
        if (master === undefined || probe !== undefined) return
        const own = master.duplicate({ lazyConnect: true, readOnly: false, retryStrategy: () => null })
        probe = own
        own.on("error", () => {})
        own.call("CLUSTER", "INFO").then(() => {}, (error: unknown) => {
          if (error instanceof Error && isPermissionRefusal(error)) resume(Effect.fail(error))
        }).finally(() => {
          own.disconnect()
          probe = undefined
        })
      }
      cluster.on("refresh", onRefresh)
      cluster.on("close", onClose)
      return Effect.sync(() => {
        cluster.off("refresh", onRefresh)
        cluster.off("close", onClose)
        probe?.disconnect()
      })
    })
