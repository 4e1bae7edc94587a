/**
 * The startup check of the ACL user's permissions (see `acl.ts`): one script round trip that
 * fails the backend with a `LockBackendError` naming each missing part of the rule.
 */
import { Effect } from "effect"
import type { LockBackendError } from "../../LockError.js"
import type { ConnectionHabits } from "./acl.js"
import { checkPermissions, missingPermissions, questionsFor } from "./acl.js"
import { redisError, unexpectedReply } from "./errors.js"
import type { ScriptClient } from "./scripts.js"
import { runScript } from "./scripts.js"

export const verifyPermissions = (
  client: ScriptClient,
  prefix: string,
  habits: ConnectionHabits
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
        `the Redis user lacks ACL permissions effect-lock needs: ${missing.join(", ")} ` +
          `(grant the rule of RedisBackend.aclRule({ prefix: ${JSON.stringify(prefix)} }), see docs/redis.md)`
      )
      error.name = "AclError"
      return Effect.fail(redisError("check-permissions", undefined, error))
    })
  )
}
