/**
 * Shared pieces of the Redis tests: a backend layer on a fresh server, an admin connection that
 * the counts below leave out, and log capture.
 */
import { Effect, Layer, Logger, LogLevel } from "effect"
import type { Scope } from "effect"
import { Redis } from "ioredis"
import type { RedisBackendOptions } from "../../src/RedisBackend.js"
import * as RedisBackend from "../../src/RedisBackend.js"
import type { RedisServer, RedisServerOptions } from "../support/redisServer.js"
import { redisServer } from "../support/redisServer.js"

/** A Redis backend on a `redis-server` of its own, both living as long as the layer. */
export const freshServerLayer = (
  options: Omit<RedisBackendOptions, "url" | "client"> = {},
  serverOptions: RedisServerOptions = {}
) =>
  Layer.unwrapScoped(
    Effect.map(redisServer(serverOptions), (server) => RedisBackend.layer({ ...options, url: server.url }))
  )

/** A plain connection for looking at the server from outside; closed with the scope. */
export const admin = (url: string): Effect.Effect<Redis, never, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.sync(() => new Redis(url, { maxRetriesPerRequest: 1, connectionName: "test-admin" })),
    (redis) => Effect.sync(() => redis.disconnect())
  )

/** Run a command on the admin connection. */
export const cmd = <A = unknown>(redis: Redis, ...args: [string, ...Array<string | number>]) =>
  Effect.promise(() => redis.call(...args) as Promise<A>)

/** The server's client connections other than admin ones (`test-admin`). */
export const clientConnections = (redis: Redis) =>
  Effect.map(
    cmd<string>(redis, "CLIENT", "LIST"),
    (list) => list.split("\n").filter((line) => line.trim() !== "" && !/ name=test-admin /.test(line))
  )

/** Every log line (logfmt, all levels) written while `effect` runs. */
export const captureLogs = <A, E, R>(effect: (lines: ReadonlyArray<string>) => Effect.Effect<A, E, R>) => {
  const lines: Array<string> = []
  const logger = Logger.make((options) => {
    lines.push(Logger.logfmtLogger.log(options))
  })
  return effect(lines).pipe(
    Effect.provide(Logger.replace(Logger.defaultLogger, logger)),
    Logger.withMinimumLogLevel(LogLevel.All)
  )
}

/** Poll `check` every 20 ms until it holds (or fail after `millis`). */
export const eventually = <E, R>(check: Effect.Effect<boolean, E, R>, millis = 10_000, what = "condition") =>
  Effect.gen(function*() {
    const deadline = Date.now() + millis
    while (!(yield* check)) {
      if (Date.now() > deadline) return yield* Effect.dieMessage(`timed out waiting for ${what}`)
      yield* Effect.sleep(20)
    }
  })

/** Messages received on `channel` by a separate subscriber connection (subscribed on return). */
export const listen = (url: string, channel: string) =>
  Effect.gen(function*() {
    const sub = yield* admin(url)
    const messages: Array<string> = []
    sub.on("message", (_channel: string, message: string) => messages.push(message))
    yield* Effect.promise(() => sub.subscribe(channel))
    return messages
  })

export type { RedisServer }
