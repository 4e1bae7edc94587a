/**
 * One Redlock node: an independent Redis master reached over the Redis backend's own machinery (its
 * two connections, the command budget, the script descriptors, the subscriptions), so a node
 * behaves exactly as a one-node `RedisBackend` does.
 */
import type { Scope } from "effect"
import { Effect, Redacted } from "effect"
import type { Redis, RedisOptions } from "ioredis"
import type { LockBackendError } from "../../LockError.js"
import type { Commands } from "../redis/commands.js"
import { makeCommands } from "../redis/commands.js"
import type { Connections } from "../redis/connection.js"
import { openConnections } from "../redis/connection.js"
import { redisError } from "../redis/errors.js"
import type { KeyLayout } from "../redis/keys.js"
import * as scripts from "../redis/lockScripts.js"
import { loadScripts } from "../redis/scripts.js"
import type { Subscriptions } from "../redis/subscriptions.js"
import { makeSubscriptions } from "../redis/subscriptions.js"
import { raiseToken } from "./scripts.js"

/** How to reach one node: a URL (plain or `Redacted`), ioredis options, or an existing client. */
export type NodeSpec = string | Redacted.Redacted<string> | RedisOptions | Redis

export interface Node {
  /** `host:port` (never credentials), for errors and logs. */
  readonly name: string
  readonly connections: Connections
  readonly commands: Commands
  readonly subscriptions: Subscriptions
}

const isClient = (spec: NodeSpec): spec is Redis =>
  typeof spec === "object" && spec !== null && !Redacted.isRedacted(spec) &&
  typeof (spec as { duplicate?: unknown }).duplicate === "function" &&
  typeof (spec as { status?: unknown }).status === "string"

/** Where a node is, for messages: from its URL (credentials dropped) or its options. */
export const nodeName = (spec: NodeSpec, index: number): string => {
  try {
    if (typeof spec === "string" || Redacted.isRedacted(spec)) {
      const url = new URL(typeof spec === "string" ? spec : Redacted.value(spec))
      return `${url.hostname}:${url.port || "6379"}`
    }
    const options: RedisOptions = isClient(spec) ? spec.options : spec
    return options.path ?? `${options.host ?? "localhost"}:${options.port ?? 6379}`
  } catch {
    return `node ${index + 1}`
  }
}

export const openNode = (
  spec: NodeSpec,
  index: number,
  layout: KeyLayout,
  commandTimeout: number
): Effect.Effect<Node, LockBackendError, Scope.Scope> =>
  Effect.gen(function*() {
    const connections = yield* openConnections(
      isClient(spec)
        ? { client: spec, commandTimeout }
        : typeof spec === "string" || Redacted.isRedacted(spec)
        ? { url: spec, commandTimeout }
        : { redis: spec, commandTimeout }
    )
    yield* Effect.tryPromise({
      try: () => loadScripts(connections.command, [...scripts.all, raiseToken] as never),
      catch: (cause) => redisError("load-scripts", undefined, cause)
    })
    const commands = makeCommands(connections, layout)
    const subscriptions = yield* makeSubscriptions(connections, layout)
    return { name: nodeName(spec, index), connections, commands, subscriptions }
  })
