/** Redlock test pieces: N `redis-server`s of their own and a Redlock backend over them. */
import { Effect, Layer } from "effect"
import type { RedlockBackendOptions } from "../../src/RedlockBackend.js"
import * as RedlockBackend from "../../src/RedlockBackend.js"
import type { RedisServer } from "../support/redisServer.js"
import { redisServer } from "../support/redisServer.js"

/** `n` servers, started together, stopped when the scope closes. */
export const redisServers = (n: number) =>
  Effect.forEach(Array.from({ length: n }), () => redisServer(), { concurrency: "unbounded" })

/** A Redlock backend over `n` fresh servers, all living as long as the layer. */
export const freshNodesLayer = (n: number, options: Omit<RedlockBackendOptions, "nodes"> = {}) =>
  Layer.unwrapScoped(
    Effect.map(redisServers(n), (servers) => RedlockBackend.layer({ ...options, nodes: servers.map((s) => s.url) }))
  )

export type { RedisServer }
