/**
 * A real Sentinel group for tests: one master, one replica and three sentinels (quorum 2), each a
 * `redis-server` process on a free loopback port (sentinels run `redis-server <conf> --sentinel`),
 * all stopped when the scope closes, however the test ends. The sentinels' config files (which
 * they rewrite) and the data servers' working directory (a replica's full sync writes an RDB file
 * there) live in a temporary directory removed with them.
 */
import { NodeContext } from "@effect/platform-node"
import { Effect } from "effect"
import type { Scope } from "effect"
import { Redis } from "ioredis"
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { freePort, redisProcess } from "./redisServer.js"

export const masterName = "mymaster"
const host = "127.0.0.1"

export interface SentinelGroup {
  /** ioredis' Sentinel options for this group: `{ sentinels, name }`. */
  readonly sentinels: ReadonlyArray<{ readonly host: string; readonly port: number }>
  readonly name: string
  /** The two data servers' ports (which one is master changes with failovers). */
  readonly dataPorts: readonly [number, number]
  /** The port of the master as the sentinels see it now. */
  readonly masterPort: () => Promise<number>
  /** Wait until the sentinels know a master with a replica linked to it. */
  readonly ready: () => Promise<void>
  /**
   * `SENTINEL FAILOVER` on one sentinel; resolves once the sentinels name the new master and the
   * old one replicates from it again. Returns the milliseconds from the request to the switch.
   */
  readonly failover: () => Promise<{ readonly from: number; readonly to: number; readonly switchMillis: number }>
}

const sleep = (millis: number) => new Promise<void>((resolve) => setTimeout(resolve, millis))

const withClient = async <A>(port: number, use: (redis: Redis) => Promise<A>): Promise<A> => {
  const redis = new Redis({ host, port, lazyConnect: true, maxRetriesPerRequest: 1, connectionName: "test-admin" })
  try {
    await redis.connect()
    return await use(redis)
  } finally {
    redis.disconnect()
  }
}

const until = async (what: string, check: () => Promise<boolean>, millis = 60_000) => {
  const deadline = Date.now() + millis
  for (;;) {
    try {
      if (await check()) return
    } catch {
      // not yet
    }
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await sleep(50)
  }
}

const sentinelConf = (masterPort: number) =>
  [
    `sentinel monitor ${masterName} ${host} ${masterPort} 2`,
    `sentinel down-after-milliseconds ${masterName} 5000`,
    `sentinel failover-timeout ${masterName} 10000`,
    `sentinel parallel-syncs ${masterName} 1`,
    ""
  ].join("\n")

const start = (
  port: number,
  options: { readonly args?: ReadonlyArray<string>; readonly leadingArgs?: ReadonlyArray<string> } = {}
) => redisProcess({ port, ...options })

/** The group, in the current scope. */
export const sentinelGroup = (): Effect.Effect<SentinelGroup, Error, Scope.Scope> =>
  Effect.gen(function*() {
    const dir = yield* Effect.acquireRelease(
      Effect.sync(() => mkdtempSync(join(tmpdir(), "effect-lock-sentinel-"))),
      (dir) => Effect.sync(() => rmSync(dir, { recursive: true, force: true }))
    )
    const port = () => Effect.promise(freePort)
    const masterPort = yield* port()
    // No 5 s pause before a full sync (the default delay waits for more replicas to come).
    const dataArgs = ["--dir", dir, "--repl-diskless-sync-delay", "0"]
    yield* start(masterPort, { args: dataArgs })
    const replicaPort = yield* port()
    yield* start(replicaPort, { args: [...dataArgs, "--replicaof", host, String(masterPort)] })
    const sentinelPorts: Array<number> = []
    for (let i = 0; i < 3; i++) {
      const sentinelPort = yield* port()
      const conf = join(dir, `sentinel-${i}.conf`)
      writeFileSync(conf, sentinelConf(masterPort))
      yield* start(sentinelPort, { leadingArgs: [conf, "--sentinel"] })
      sentinelPorts.push(sentinelPort)
    }

    const askSentinel = <A>(index: number, ...args: [string, ...Array<string>]) =>
      withClient(sentinelPorts[index] ?? 0, (redis) => redis.call(...args) as Promise<A>)

    const currentMaster = async () => {
      const [, port] = await askSentinel<[string, string]>(0, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", masterName)
      return Number(port)
    }

    const linked = async (replicaPort: number) =>
      withClient(replicaPort, async (redis) => /master_link_status:up/.test(await redis.info("replication")))

    const ready = async () => {
      await until("the sentinels to know the master, its replica and each other", async () => {
        const master = await currentMaster()
        const replica = master === masterPort ? replicaPort : masterPort
        if (!(await linked(replica))) return false
        for (let i = 0; i < sentinelPorts.length; i++) {
          const replicas = await askSentinel<Array<Array<string>>>(i, "SENTINEL", "REPLICAS", masterName)
          const known = replicas.some((fields) => {
            const entry = new Map<string, string>()
            for (let f = 0; f + 1 < fields.length; f += 2) entry.set(fields[f]!, fields[f + 1]!)
            return entry.get("port") === String(replica) && entry.get("flags") === "slave" &&
              entry.get("master-link-status") === "ok"
          })
          const sentinels = await askSentinel<Array<unknown>>(i, "SENTINEL", "SENTINELS", masterName)
          if (!known || sentinels.length < sentinelPorts.length - 1) return false
        }
        return true
      })
    }

    const failover = async () => {
      await ready()
      const from = await currentMaster()
      const started = Date.now()
      await askSentinel(0, "SENTINEL", "FAILOVER", masterName)
      let switchMillis = 0
      await until("the sentinels to name a new master", async () => {
        if ((await currentMaster()) === from) return false
        switchMillis = Date.now() - started
        return true
      })
      const to = await currentMaster()
      // The old master is reconfigured as a replica of the new one: wait until it has synced.
      await until("the old master to replicate from the new one", () => linked(from))
      return { from, to, switchMillis }
    }

    return {
      sentinels: sentinelPorts.map((port) => ({ host, port })),
      name: masterName,
      dataPorts: [masterPort, replicaPort] as const,
      masterPort: currentMaster,
      ready,
      failover
    }
  }).pipe(Effect.provide(NodeContext.layer))
