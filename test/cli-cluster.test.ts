/**
 * The `effect-lock` executable against a real Redis Cluster (3 masters, 3 replicas): given the
 * URL of any one node it recognizes the cluster; `inspect` reads each lock on its slot's master
 * (sharded waiters counted), `list` scans every master, `unlock --force` publishes with
 * `SPUBLISH` on the lock's shard so that sharded waiters (the library's) hear it, for a mutex, a
 * read-write lock and a fair lock's first waiter, and `watch` follows releases through sharded
 * subscriptions and acquisitions through every master's keyspace events.
 */
import type { Layer } from "effect"
import { Deferred, Effect, Exit, Fiber, ManagedRuntime, Scope } from "effect"
import { spawn } from "node:child_process"
import { resolve } from "node:path"
import { fileURLToPath } from "node:url"
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest"
import * as FairLock from "../src/FairLock.js"
import * as Lock from "../src/Lock.js"
import type { LockBackend } from "../src/LockBackend.js"
import * as ReadWriteLock from "../src/ReadWriteLock.js"
import * as RedisBackend from "../src/RedisBackend.js"
import { skipCluster } from "./cluster/helpers.js"
import { cliBuild } from "./support/cliBuild.js"
import type { RedisCluster } from "./support/redisCluster.js"
import { startRedisCluster } from "./support/redisCluster.js"

const skip = skipCluster()
vi.setConfig({ testTimeout: 300_000 })
const root = resolve(fileURLToPath(import.meta.url), "..", "..")
const built = cliBuild("cli-cluster-test")
const bin = built.bin
const prefix = "locks:"

const cli = built.run

let cluster: RedisCluster
let url: string
/** Three lock names, one on each master. */
let names: Array<string>

const runtimes: Array<ManagedRuntime.ManagedRuntime<LockBackend, never>> = []
const runtime = () => {
  const made = ManagedRuntime.make(
    RedisBackend.layer({ cluster: { nodes: cluster.nodes }, prefix }) as Layer.Layer<LockBackend>
  )
  runtimes.push(made)
  return made
}

/** Take `effect` (a scoped acquisition) in a scope of its own; the returned function releases it. */
const hold = async <A>(
  made: ManagedRuntime.ManagedRuntime<LockBackend, never>,
  effect: Effect.Effect<A, unknown, LockBackend | Scope.Scope>
) => {
  const scope = await made.runPromise(Scope.make())
  const value = await made.runPromise(Scope.extend(effect, scope))
  return { value, release: () => made.runPromise(Effect.ignore(Scope.close(scope, Exit.void))) }
}

/** Connections subscribed (sharded) to `channel`, asked of the master of its slot. */
const shardSubscribers = async (channel: string) => {
  const master = await cluster.masterOf(channel)
  const reply = await cluster.node(master.port).call("PUBSUB", "SHARDNUMSUB", channel) as [string, number]
  return Number(reply[1])
}

const until = async (check: () => boolean | Promise<boolean>, what: string, detail: () => string = () => "") => {
  const deadline = Date.now() + 30_000
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`no ${what} within 30 s ${detail()}`)
    await new Promise((r) => setTimeout(r, 50))
  }
}

/** Start the library waiting for `effect` in a fiber; resolves once it has its sharded subscription. */
const waitFor = async (
  made: ManagedRuntime.ManagedRuntime<LockBackend, never>,
  effect: Effect.Effect<unknown, unknown, LockBackend | Scope.Scope>,
  channel: string,
  before: number
) => {
  const got = await made.runPromise(Deferred.make<void>())
  const fiber = made.runFork(Effect.scoped(Effect.zipRight(effect, Deferred.succeed(got, undefined))))
  await until(async () => (await shardSubscribers(channel)) > before, `waiter subscribed to ${channel}`)
  return { got: () => made.runPromise(Deferred.await(got)), done: () => made.runPromise(Fiber.join(fiber)) }
}

beforeAll(async () => {
  if (skip) return
  const [started] = await Promise.all([
    startRedisCluster(),
    built.make()
  ])
  cluster = started
  // Any node will do: a replica's URL too.
  const replica = (await cluster.topology()).find((node) => node.role === "replica")!
  url = `redis://127.0.0.1:${replica.port}`
  const masters = new Map<string, string>()
  for (let i = 0; masters.size < 3; i++) {
    const master = await cluster.masterOf(`${prefix}c:${i}`)
    if (!masters.has(master.id)) masters.set(master.id, `c:${i}`)
  }
  names = [...masters.values()]
}, 300_000)

afterAll(async () => {
  for (const made of runtimes) await made.dispose()
  await cluster?.stop()
  built.remove()
})

describe.skipIf(skip)("effect-lock CLI on a Redis Cluster", () => {
  it("inspect and list: locks on all three masters, sharded waiters counted", async () => {
    const made = runtime()
    const held = await Promise.all(
      names.map((name) => hold(made, Lock.acquire(name, { lease: "30 seconds" })))
    )
    const [first] = names as [string]
    const waiter = await waitFor(
      runtime(),
      Lock.acquire(first, { lease: "30 seconds" }),
      `redisson_lock__channel:{${prefix}${first}}`,
      0
    )
    const [inspected, listed] = await Promise.all([
      cli(["inspect", first, "--url", url, "--prefix", prefix, "--json"]),
      cli(["list", "c:*", "--url", url, "--prefix", prefix, "--json"])
    ])
    expect(inspected).toMatchObject({ code: 0, stderr: "" })
    expect(JSON.parse(inspected.stdout)).toMatchObject({
      key: first,
      kind: "lock",
      fencingToken: String(held[0]!.value.fencingToken),
      waiters: 1
    })
    expect(listed).toMatchObject({ code: 0, stderr: "" })
    const lines = listed.stdout.trim().split("\n").map((line) => JSON.parse(line) as { key: string })
    expect(lines.map((line) => line.key)).toEqual([...names].sort())
    for (const { release } of held) await release()
    await waiter.got()
    await waiter.done()
  })

  it("unlock --force publishes with SPUBLISH on the lock's shard: sharded waiters of a mutex, a read-write lock and a fair lock are woken", async () => {
    const holder = runtime()
    const waiters = runtime()
    const [mutex, rw, fair] = names as [string, string, string]
    // A mutex with a waiter.
    const lock = await hold(holder, Lock.acquire(mutex, { lease: "30 seconds" }))
    const mutexWaiter = await waitFor(
      waiters,
      Lock.acquire(mutex, { lease: "30 seconds" }),
      `redisson_lock__channel:{${prefix}${mutex}}`,
      0
    )
    const unlocked = await cli(["unlock", mutex, "--force", "--yes", "--url", url, "--prefix", prefix, "--json"])
    expect(unlocked).toMatchObject({ code: 0, stderr: "" })
    // SPUBLISH reaches the waiter's sharded subscription; a plain PUBLISH would reach nobody (0).
    expect(JSON.parse(unlocked.stdout)).toMatchObject({ key: mutex, unlocked: true, woke: 1 })
    await mutexWaiter.got()
    await mutexWaiter.done()
    await lock.release()

    // A read lock held, a writer waiting on the read-write lock's channel.
    const read = await hold(holder, ReadWriteLock.acquireRead(rw, { lease: "30 seconds" }))
    const writer = await waitFor(
      waiters,
      ReadWriteLock.acquireWrite(rw, { lease: "30 seconds" }),
      `redisson_rwlock:{${prefix}${rw}}`,
      0
    )
    const rwUnlocked = await cli(["unlock", rw, "--force", "--yes", "--url", url, "--prefix", prefix, "--json"])
    expect(rwUnlocked).toMatchObject({ code: 0, stderr: "" })
    expect(JSON.parse(rwUnlocked.stdout)).toMatchObject({ key: rw, unlocked: true })
    expect(JSON.parse(rwUnlocked.stdout).woke).toBeGreaterThanOrEqual(1)
    await writer.got()
    await writer.done()
    await read.release()

    // A fair lock: its first waiter is told on its own channel, under the lock's.
    const fairHeld = await hold(holder, FairLock.acquire(fair, { lease: "30 seconds" }))
    const fairGot = await waiters.runPromise(Deferred.make<void>())
    const fairFiber = waiters.runFork(
      Effect.scoped(
        Effect.zipRight(FairLock.acquire(fair, { lease: "30 seconds" }), Deferred.succeed(fairGot, undefined))
      )
    )
    await until(async () => {
      const inspected = await cli(["inspect", fair, "--url", url, "--prefix", prefix, "--json"])
      return inspected.code === 0 && (JSON.parse(inspected.stdout) as { waiters: number }).waiters >= 1
    }, "fair waiter in line")
    const queue = `redisson_lock_queue:{${prefix}${fair}}`
    const first = await cluster.node((await cluster.masterOf(queue)).port).call("LINDEX", queue, 0) as string
    await until(
      async () => (await shardSubscribers(`redisson_lock__channel:{${prefix}${fair}}:${first}`)) >= 1,
      "fair waiter subscribed"
    )
    const fairUnlocked = await cli(["unlock", fair, "--force", "--yes", "--url", url, "--prefix", prefix, "--json"])
    expect(fairUnlocked).toMatchObject({ code: 0, stderr: "" })
    expect(JSON.parse(fairUnlocked.stdout)).toMatchObject({ key: fair, unlocked: true })
    expect(JSON.parse(fairUnlocked.stdout).woke).toBeGreaterThanOrEqual(1)
    await waiters.runPromise(Deferred.await(fairGot))
    await waiters.runPromise(Fiber.join(fairFiber))
    await fairHeld.release()
  })

  /** `watch --json` as a child process; its output so far, and a way to end it with SIGINT. */
  const startWatch = (watchUrl = url) => {
    const child = spawn(
      process.execPath,
      // No refresh during the test: every change must come from a notification.
      [bin, "watch", "c:*", "--url", watchUrl, "--prefix", prefix, "--json", "--interval", "600000"],
      { cwd: root, env: { ...process.env, NO_COLOR: "1" }, stdio: ["ignore", "pipe", "pipe"] }
    )
    const out = { stdout: "", stderr: "" }
    child.stdout.setEncoding("utf8").on("data", (chunk: string) => (out.stdout += chunk))
    child.stderr.setEncoding("utf8").on("data", (chunk: string) => (out.stderr += chunk))
    const closed = new Promise<number | null>((r) => child.once("close", (code) => r(code)))
    const events = () =>
      out.stdout.trim().split("\n").filter((line) => line !== "").map((line) =>
        JSON.parse(line) as { key: string; event: string; waiters: number }
      )
    const detail = () => `stdout ${out.stdout} stderr ${out.stderr}`
    return { child, out, closed, events, detail }
  }

  it("watch: a release through the lock's sharded channel (keyspace events off), acquisitions on every master through keyspace events; SIGINT leaves with 0", async () => {
    const made = runtime()
    const [name] = names as [string]
    const channel = `redisson_lock__channel:{${prefix}${name}}`
    const held = await hold(made, Lock.acquire(name, { lease: "30 seconds" }))
    const before = await shardSubscribers(channel)
    const watch = startWatch()
    // The lock on the table: watch follows its release channel on its shard.
    await until(
      async () => watch.out.stderr !== "" || (await shardSubscribers(channel)) > before,
      "sharded subscription",
      watch.detail
    )
    await held.release()
    await until(
      () => watch.events().some((e) => e.key === name && e.event === "released"),
      "released line",
      watch.detail
    )
    // Followed no more once it is off the table.
    await until(async () => (await shardSubscribers(channel)) === before, "sharded unsubscription", watch.detail)
    watch.child.kill("SIGINT")
    expect(await watch.closed).toBe(0)

    // Keyspace events on: each master publishes its own keys' events, and watch listens on each.
    await Promise.all(
      cluster.nodes.map((node) => cluster.node(node.port).call("CONFIG", "SET", "notify-keyspace-events", "KA"))
    )
    const [marker, other1, other2] = names as [string, string, string]
    const markerHeld = await hold(made, Lock.acquire(marker, { lease: "30 seconds" }))
    const second = startWatch()
    // Ready once it subscribed to every master's keyspace events and followed the lock it found held.
    await until(
      async () => {
        const patterns = await Promise.all(
          cluster.nodes.map((node) => cluster.node(node.port).call("PUBSUB", "NUMPAT") as Promise<number>)
        )
        return second.out.stderr !== "" ||
          (patterns.filter((n) => n > 0).length === 3 && (await shardSubscribers(channel)) > before)
      },
      "keyspace subscriptions on the three masters",
      second.detail
    )
    const seen = (key: string, event: string) => () => second.events().some((e) => e.key === key && e.event === event)
    const others = await Promise.all([other1, other2].map((n) => hold(made, Lock.acquire(n, { lease: "30 seconds" }))))
    await markerHeld.release()
    await until(seen(other1, "acquired"), `acquired line for ${other1}`, second.detail)
    await until(seen(other2, "acquired"), `acquired line for ${other2}`, second.detail)
    await until(seen(marker, "released"), `released line for ${marker}`, second.detail)
    // The third master's keyspace events: an acquisition nobody announced otherwise.
    const again = await hold(made, Lock.acquire(marker, { lease: "30 seconds" }))
    await until(seen(marker, "acquired"), `acquired line for ${marker}`, second.detail)
    for (const { release } of [...others, again]) await release()
    for (const n of [other1, other2]) await until(seen(n, "released"), `released line for ${n}`, second.detail)
    second.child.kill("SIGINT")
    expect(await second.closed).toBe(0)
    expect(second.out.stderr).toBe("")
    // watch's own sharded subscriptions are not counted as waiters.
    expect(second.events().map((e) => e.waiters)).toEqual(second.events().map(() => 0))
  })

  it("the URL's user and password reach every node (CLIENT LIST user=cli on each master); a wrong password exits 5 without echoing it; a user without INFO is recognized by CLUSTER INFO, one without either gets MOVED explained", async () => {
    const secret = "cli-pa55-word"
    await Promise.all(
      cluster.nodes.map((node) =>
        cluster.node(node.port).call("ACL", "SETUSER", "cli", "reset", "on", `>${secret}`, "+@all", "~*", "&*")
      )
    )
    await Promise.all(
      cluster.nodes.map((node) => cluster.node(node.port).call("CONFIG", "SET", "notify-keyspace-events", "KA"))
    )
    const port = new URL(url).port
    const watch = startWatch(`redis://cli:${secret}@127.0.0.1:${port}`)
    const masters = (await cluster.topology()).filter((node) => node.role === "master")
    // With keyspace events on, watch holds a connection to every master.
    await until(
      async () => {
        const lists = await Promise.all(
          masters.map((master) => cluster.node(master.port).call("CLIENT", "LIST") as Promise<string>)
        )
        return watch.out.stderr !== "" ||
          lists.every((list) => list.split("\n").some((line) => /name=effect-lock-cli-watch /.test(line)))
      },
      "watch connections on every master",
      watch.detail
    )
    const lists = await Promise.all(
      masters.map((master) => cluster.node(master.port).call("CLIENT", "LIST") as Promise<string>)
    )
    for (const list of lists) {
      const cli = list.split("\n").filter((line) => /name=effect-lock-cli/.test(line))
      expect(cli.length).toBeGreaterThan(0)
      for (const line of cli) expect(line).toContain(" user=cli ")
    }
    watch.child.kill("SIGINT")
    expect(await watch.closed).toBe(0)
    const wrong = await cli(["list", "--url", `redis://cli:not-${secret}@127.0.0.1:${port}`])
    expect(wrong.code).toBe(5)
    expect(wrong.stderr).not.toContain(secret)

    // A user who may not run INFO: the cluster is recognized by CLUSTER INFO; without that either,
    // a key on another master is refused with MOVED, and the error says why.
    const setUser = (name: string, ...tokens: ReadonlyArray<string>) =>
      Promise.all(
        cluster.nodes.map((node) =>
          cluster.node(node.port).call("ACL", "SETUSER", name, "reset", "on", `>${secret}`, "~*", "&*", ...tokens)
        )
      )
    await setUser("no-info", "+@all", "-info")
    await setUser("blind", "+@all", "-info", "-cluster")
    const held = await Promise.all(names.map((n) => hold(runtime(), Lock.acquire(n, { lease: "30 seconds" }))))
    const listed = await cli([
      "list",
      "c:*",
      "--url",
      `redis://no-info:${secret}@127.0.0.1:${port}`,
      "--prefix",
      prefix
    ])
    expect(listed).toMatchObject({ code: 0, stderr: "" })
    for (const n of names) expect(listed.stdout).toContain(n)
    const moved = await Promise.all(
      names.map((n) => cli(["inspect", n, "--url", `redis://blind:${secret}@127.0.0.1:${port}`, "--prefix", prefix]))
    )
    const refused = moved.filter((run) => run.code !== 0)
    expect(refused.length).toBeGreaterThan(0)
    for (const run of refused) {
      expect(run.code).toBe(1)
      expect(run.stderr).toMatch(/MOVED .*a Redis Cluster node/)
    }
    for (const { release } of held) await release()
  })
})
