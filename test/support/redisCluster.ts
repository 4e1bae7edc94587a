/**
 * A real Redis Cluster for tests: three masters and three replicas, each a `redis-server
 * --cluster-enabled yes` on free loopback ports (client port and cluster-bus port both chosen
 * free), joined with `redis-cli --cluster create ... --cluster-replicas 1 --cluster-yes`, in a
 * temporary directory that is removed afterwards.
 *
 * `cluster_state:ok` is not enough to start testing: for about two seconds after it the nodes
 * still disagree on who is master of what. `startRedisCluster` returns only once every node
 * reports the same roles and the same slot owners (`settled`) and every replica's replication link
 * is up (`replicated`).
 *
 * Agreeing on roles is not replicating: a replica asks its master for a full sync only once it
 * knows its role, and Redis 7 waits `repl-diskless-sync-delay` (5 s by default) before sending
 * it. A `CLUSTER FAILOVER` in that window can promote a replica that holds none of the shard's
 * data (seen here: a lock held on the old master was free on the new one, its fencing counter
 * back at 0, so a waiter got in with the holder's own token), and the old master then drops its
 * data to sync from the new one. So the nodes run with `repl-diskless-sync-delay 0`, and
 * `failover` waits until the replica's link is up before it asks.
 *
 * Two forms, like `redisServer.ts`: `redisCluster()` is a scoped Effect resource,
 * `startRedisCluster()` a plain promise for `beforeAll` / `afterAll`. Either way the processes
 * stop however the test ends (and are SIGKILLed at process exit as a last resort).
 */
import { NodeContext } from "@effect/platform-node"
import { Cause, Effect, Exit, Scope } from "effect"
import { Redis } from "ioredis"
import { spawn, spawnSync } from "node:child_process"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { freePort, redisProcess } from "./redisServer.js"

const host = "127.0.0.1"

export interface ClusterNodeAddress {
  readonly host: string
  readonly port: number
}

/** One node as every node of the cluster sees it (they agree once `settled`). */
export interface ClusterNodeInfo {
  readonly id: string
  readonly port: number
  readonly role: "master" | "replica"
  /** The master's id, for a replica. */
  readonly masterId: string | undefined
  /** Slot ranges `[from, to]` a master serves. */
  readonly slots: ReadonlyArray<readonly [number, number]>
}

export interface RedisCluster {
  /** The six nodes' addresses (startup nodes for a client). */
  readonly nodes: ReadonlyArray<ClusterNodeAddress>
  /** The topology, once all nodes agree on it. */
  readonly topology: () => Promise<ReadonlyArray<ClusterNodeInfo>>
  /** The master serving `key`'s slot (Redis' own `CLUSTER KEYSLOT`). */
  readonly masterOf: (key: string) => Promise<ClusterNodeInfo>
  /** `CLUSTER KEYSLOT key`, asked of the server. */
  readonly slotOf: (key: string) => Promise<number>
  /**
   * `CLUSTER FAILOVER` on a replica of the master serving `key`, once that replica's replication
   * link is up, then wait until every node agrees that the replica is master. Returns the old and
   * the new master.
   */
  readonly failover: (key: string) => Promise<{ readonly from: ClusterNodeInfo; readonly to: ClusterNodeInfo }>
  /** Wait until every node reports `cluster_state:ok` and the same roles and slots. */
  readonly settled: () => Promise<void>
  /** A plain (non-cluster) admin connection to one node; closed by `stop`. */
  readonly node: (port: number) => Redis
  /** Stop every node and delete the directory. Idempotent. */
  readonly stop: () => Promise<void>
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

export const clusterAvailable = (): boolean =>
  spawnSync("sh", ["-c", "command -v redis-server && command -v redis-cli"], { stdio: "ignore" }).status === 0

const parseNodes = (text: string): ReadonlyArray<ClusterNodeInfo & { readonly flags: ReadonlyArray<string> }> =>
  text.split("\n").filter((line) => line.trim() !== "").map((line) => {
    const [id = "", address = "", flagText = "", master = "-", , , , , ...slotFields] = line.trim().split(" ")
    const flags = flagText.split(",")
    const port = Number(address.split("@")[0]?.split(":").pop())
    const slots = slotFields
      .filter((field) => !field.startsWith("["))
      .map((field) => {
        const [from, to] = field.split("-")
        return [Number(from), Number(to ?? from)] as const
      })
    return {
      id,
      port,
      flags,
      role: flags.includes("master") ? "master" : "replica",
      masterId: master === "-" ? undefined : master,
      slots
    }
  })

export interface RedisClusterOptions {
  /** Extra `redis-server` arguments for every node. */
  readonly args?: ReadonlyArray<string> | undefined
}

/** The six node processes, each a scoped `redisProcess` in `scope`, in a temporary directory. */
const startNodes = (scope: Scope.Scope, options: RedisClusterOptions) =>
  Effect.gen(function*() {
    const dir = yield* Effect.acquireRelease(
      Effect.sync(() => mkdtempSync(join(tmpdir(), "effect-lock-cluster-"))),
      (dir) => Effect.sync(() => rmSync(dir, { recursive: true, force: true }))
    )
    const ports: Array<number> = []
    while (ports.length < 6) {
      const port = yield* Effect.promise(freePort)
      const bus = yield* Effect.promise(freePort)
      if (ports.includes(port) || ports.includes(bus) || port === bus) continue
      const started = yield* Effect.either(redisProcess({
        port,
        args: [
          "--cluster-enabled",
          "yes",
          "--cluster-port",
          String(bus),
          "--cluster-config-file",
          join(dir, `nodes-${port}.conf`),
          "--cluster-node-timeout",
          "2000",
          "--dir",
          dir,
          // The replicas' first sync at once, not after Redis 7's default 5 s (see the top).
          "--repl-diskless-sync-delay",
          "0",
          ...(options.args ?? [])
        ]
      }))
      // The port or the bus port was taken in between: try others.
      if (started._tag === "Right") ports.push(port)
    }
    return ports
  }).pipe(Scope.extend(scope), Effect.provide(NodeContext.layer))

/**
 * Start a 3-master, 3-replica cluster on free loopback ports and wait until it has settled. Its
 * processes live in a scope of their own, closed by `stop()` (and SIGKILLed at process exit as a
 * last resort).
 */
export const startRedisCluster = async (options: RedisClusterOptions = {}): Promise<RedisCluster> => {
  const scope = Effect.runSync(Scope.make())
  const admins = new Map<number, Redis>()
  let stopped = false
  const stop = async () => {
    if (stopped) return
    stopped = true
    for (const redis of admins.values()) redis.disconnect()
    await Effect.runPromise(Scope.close(scope, Exit.void))
  }
  try {
    const started = await Effect.runPromiseExit(startNodes(scope, options))
    if (Exit.isFailure(started)) throw Cause.squash(started.cause)
    const ports = started.value
    const created = await new Promise<{ code: number | null; output: string }>((resolve) => {
      const cli = spawn(
        "redis-cli",
        ["--cluster", "create", ...ports.map((port) => `${host}:${port}`), "--cluster-replicas", "1", "--cluster-yes"],
        { stdio: ["ignore", "pipe", "pipe"] }
      )
      let output = ""
      cli.stdout.on("data", (chunk) => (output += chunk))
      cli.stderr.on("data", (chunk) => (output += chunk))
      cli.on("exit", (code) => resolve({ code, output }))
    })
    if (created.code !== 0) throw new Error(`redis-cli --cluster create failed: ${created.output}`)

    const node = (port: number) => {
      let redis = admins.get(port)
      if (redis === undefined) {
        redis = new Redis({ host, port, maxRetriesPerRequest: 1, connectionName: "test-admin", lazyConnect: false })
        redis.on("error", () => {})
        admins.set(port, redis)
      }
      return redis
    }
    const call = <A>(port: number, ...args: [string, ...Array<string | number>]) =>
      node(port).call(...args) as Promise<A>

    const views = () => Promise.all(ports.map((port) => call<string>(port, "CLUSTER", "NODES").then(parseNodes)))
    const describe = (view: ReturnType<typeof parseNodes>) =>
      view.map((n) => `${n.id}:${n.role}:${n.masterId ?? "-"}:${JSON.stringify(n.slots)}`).sort().join("\n")

    const settled = async () => {
      const deadline = Date.now() + 30_000
      for (;;) {
        const states = await Promise.all(ports.map((port) => call<string>(port, "CLUSTER", "INFO")))
        if (states.every((info) => info.includes("cluster_state:ok"))) {
          const all = await views()
          const first = all[0] ?? []
          const agreed = all.every((view) => describe(view) === describe(first))
          const healthy = first.length === 6 &&
            first.every((n) => !n.flags.some((f) => /fail|handshake|noaddr/.test(f))) &&
            first.filter((n) => n.role === "master" && n.slots.length > 0).length === 3 &&
            first.filter((n) => n.role === "replica").length === 3
          if (agreed && healthy) return
        }
        if (Date.now() > deadline) throw new Error("the cluster did not settle within 30 s")
        await sleep(100)
      }
    }
    /** Wait until the replication link of every replica (or of the replica on `port`) is up. */
    const replicated = async (only?: number) => {
      const deadline = Date.now() + 30_000
      for (;;) {
        const infos = await Promise.all(
          (only === undefined ? ports : [only]).map((port) => call<string>(port, "INFO", "replication"))
        )
        if (infos.every((info) => info.includes("role:master") || info.includes("master_link_status:up"))) return
        if (Date.now() > deadline) throw new Error("the replicas' replication links did not come up within 30 s")
        await sleep(100)
      }
    }
    await settled()
    await replicated()

    const topology = async () => {
      await settled()
      const [view] = await views()
      return (view ?? []).map(({ flags: _, ...info }) => info)
    }
    const slotOf = (key: string) => call<number>(ports[0]!, "CLUSTER", "KEYSLOT", key)
    const masterOf = async (key: string) => {
      const slot = await slotOf(key)
      const found = (await topology()).find((n) =>
        n.role === "master" && n.slots.some(([from, to]) => slot >= from && slot <= to)
      )
      if (found === undefined) throw new Error(`no master serves slot ${slot}`)
      return found
    }
    const failover = async (key: string) => {
      const from = await masterOf(key)
      const to = (await topology()).find((n) => n.masterId === from.id)
      if (to === undefined) throw new Error(`master ${from.port} has no replica`)
      // A manual failover loses nothing only from a replica that replicates (see the top).
      await replicated(to.port)
      await call(to.port, "CLUSTER", "FAILOVER")
      const deadline = Date.now() + 30_000
      for (;;) {
        const view = (await views()).map((v) => v.find((n) => n.id === to.id)?.role)
        if (view.every((role) => role === "master")) break
        if (Date.now() > deadline) throw new Error("CLUSTER FAILOVER did not complete within 30 s")
        await sleep(50)
      }
      await settled()
      const topo = await topology()
      return { from: topo.find((n) => n.id === from.id)!, to: topo.find((n) => n.id === to.id)! }
    }
    return {
      nodes: ports.map((port) => ({ host, port })),
      topology,
      masterOf,
      slotOf,
      failover,
      settled,
      node,
      stop
    }
  } catch (error) {
    await stop()
    throw error
  }
}

/** `startRedisCluster` as a scoped resource: the cluster stops when the scope closes. */
export const redisCluster = (): Effect.Effect<RedisCluster, Error, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.tryPromise({
      try: () => startRedisCluster(),
      catch: (error) => error instanceof Error ? error : new Error(String(error))
    }),
    (cluster) => Effect.promise(() => cluster.stop())
  )
