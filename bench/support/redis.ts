/**
 * The Redis server the bench runs against, and an admin connection to look at it from outside.
 *
 * Without `REDIS_URL` the bench starts its own throw-away `redis-server` on a free loopback port
 * (`--save "" --appendonly no`, via the test helper) and stops it at the end. With `REDIS_URL`
 * it uses that server, but only on a loopback address: the bench runs `FLUSHALL` and
 * `CONFIG RESETSTAT` between runs, which must never reach a shared server.
 */
import { Redis } from "ioredis"
import { spawnSync } from "node:child_process"
import { startRedisServer } from "../../test/support/redisServer.js"

export interface BenchServer {
  readonly url: string
  readonly host: string
  readonly port: number
  readonly version: string
  /** Whether the bench started this server (and will stop it). */
  readonly own: boolean
  readonly stop: () => Promise<void>
}

const loopback = new Set(["127.0.0.1", "localhost", "::1", "[::1]"])

export const startServer = async (): Promise<BenchServer> => {
  const given = process.env["REDIS_URL"]
  let url: string
  let stop: () => Promise<void>
  let own: boolean
  if (given !== undefined && given !== "") {
    const parsed = new URL(given)
    if (!loopback.has(parsed.hostname)) {
      throw new Error(`REDIS_URL must point at a loopback address (it is flushed); got host ${parsed.hostname}`)
    }
    url = given
    stop = () => Promise.resolve()
    own = false
  } else {
    if (spawnSync("sh", ["-c", "command -v redis-server"], { stdio: "ignore" }).status !== 0) {
      throw new Error("redis-server is not on the PATH; install it or set REDIS_URL to a loopback server")
    }
    const server = await startRedisServer()
    if (!server.controlled) throw new Error("expected a bench-owned redis-server")
    url = server.url
    stop = server.stop
    own = true
  }
  const parsed = new URL(url)
  const admin = new Redis(url, { connectionName: adminName, lazyConnect: true })
  await admin.connect()
  const info = await admin.info("server")
  admin.disconnect()
  const version = /redis_version:(\S+)/.exec(info)?.[1] ?? "unknown"
  return { url, host: parsed.hostname, port: Number(parsed.port || 6379), version, own, stop }
}

/** The admin connection's name; connection counts leave it out. */
export const adminName = "bench-admin"

export interface Admin {
  readonly redis: Redis
  readonly flushAll: () => Promise<void>
  readonly resetStats: () => Promise<void>
  /** `INFO commandstats` as calls per command (`evalsha`, `client|list`, ...). */
  readonly commandStats: () => Promise<Map<string, number>>
  /**
   * The server's total time in commands so far (microseconds, `INFO commandstats`), the admin
   * connection's own `INFO` and `CONFIG` calls left out.
   */
  readonly serverMicros: () => Promise<number>
  /** Client connections other than admin ones. */
  readonly connections: () => Promise<number>
  readonly close: () => void
}

export const openAdmin = async (url: string): Promise<Admin> => {
  const redis = new Redis(url, { connectionName: adminName, lazyConnect: true, maxRetriesPerRequest: 1 })
  await redis.connect()
  return {
    redis,
    flushAll: async () => {
      await redis.flushall()
    },
    resetStats: async () => {
      await redis.config("RESETSTAT")
    },
    commandStats: async () => {
      const text = await redis.info("commandstats")
      const stats = new Map<string, number>()
      for (const match of text.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) {
        stats.set(match[1]!, Number(match[2]))
      }
      return stats
    },
    serverMicros: async () => {
      const text = await redis.info("commandstats")
      let micros = 0
      for (const match of text.matchAll(/^cmdstat_([^:]+):calls=\d+,usec=(\d+)/gm)) {
        if (match[1] !== "info" && !match[1]!.startsWith("config")) micros += Number(match[2])
      }
      return micros
    },
    connections: async () => {
      const list = (await redis.call("CLIENT", "LIST")) as string
      return list.split("\n").filter((line) => line.trim() !== "" && !line.includes(` name=${adminName} `)).length
    },
    close: () => redis.disconnect()
  }
}

/** Per-command differences `after - before`, dropping zeros. */
export const diffStats = (before: Map<string, number>, after: Map<string, number>): Map<string, number> => {
  const diff = new Map<string, number>()
  for (const [name, calls] of after) {
    const delta = calls - (before.get(name) ?? 0)
    if (delta !== 0) diff.set(name, delta)
  }
  return diff
}
