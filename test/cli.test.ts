/**
 * The `effect-lock` executable, built to JavaScript and run as a user runs it (a spawned `node`
 * process, its stdout, stderr and exit code asserted) against a real redis-server whose locks are
 * taken by the library itself. `watch` runs in a pseudo-terminal (a tmux session of the test's
 * own) and its screen is captured.
 */
import type { Layer } from "effect"
import { Deferred, Effect, Exit, Fiber, ManagedRuntime, Scope } from "effect"
import { Redis } from "ioredis"
import { spawn, spawnSync } from "node:child_process"
import { existsSync, readFileSync, rmSync } from "node:fs"
import { join, resolve } from "node:path"
import { fileURLToPath } from "node:url"
import { afterAll, beforeAll, describe, expect, it, onTestFinished, vi } from "vitest"
import * as Lock from "../src/Lock.js"
import type { LockBackend } from "../src/LockBackend.js"
import * as ReadWriteLock from "../src/ReadWriteLock.js"
import * as RedisBackend from "../src/RedisBackend.js"
import { cliBuild } from "./support/cliBuild.js"
import { freePort, type RedisServer, skipRedis, startRedisServer } from "./support/redisServer.js"

const skip = skipRedis(true)
// Each run of the executable starts a Node process (about a second of CPU): on a loaded machine a
// test of several runs takes minutes.
vi.setConfig({ testTimeout: 300_000 })
const root = resolve(fileURLToPath(import.meta.url), "..", "..")
const built = cliBuild("cli-test")
const build = built.dir
const bin = built.bin

/** Run the executable to its end. */
const cli = built.run

let server: RedisServer
let guarded: RedisServer
let admin: Redis

/** A runtime with a Redis backend on the test server. */
const backend = (options: { readonly prefix?: string } = {}) =>
  ManagedRuntime.make(RedisBackend.layer({ url: server.url, ...options }) as Layer.Layer<LockBackend>)

/** Take `key` in a scope of its own; closing the scope releases it. */
const hold = async (runtime: ManagedRuntime.ManagedRuntime<LockBackend, never>, key: string) => {
  const scope = await runtime.runPromise(Scope.make())
  const lease = await runtime.runPromise(Scope.extend(Lock.acquire(key, { lease: "30 seconds" }), scope))
  return { lease, release: () => runtime.runPromise(Scope.close(scope, Exit.void)) }
}

const runtimes: Array<ManagedRuntime.ManagedRuntime<LockBackend, never>> = []
const runtime = (options: { readonly prefix?: string } = {}) => {
  const made = backend(options)
  runtimes.push(made)
  return made
}

beforeAll(async () => {
  if (skip) return
  const [started, secured] = await Promise.all([
    startRedisServer({ args: ["--notify-keyspace-events", "KA"] }),
    startRedisServer({ args: ["--requirepass", "s3cret-pw"] }),
    built.make()
  ])
  server = started
  guarded = secured
  admin = new Redis(server.url, { connectionName: "test-admin" }).on("error", () => {})
}, 300_000)

afterAll(async () => {
  for (const made of runtimes) await made.dispose()
  admin?.disconnect()
  await server?.stop()
  await guarded?.stop()
  built.remove()
})

const contract = ["key", "kind", "holders", "ttlMillis", "fencingToken", "waiters"]

describe.skipIf(skip)("effect-lock CLI", () => {
  it("--help reads like a man page and exits 0", async () => {
    const help = await cli(["--help"])
    expect(help.code).toBe(0)
    for (const section of ["USAGE", "DESCRIPTION", "COMMANDS", "EXIT STATUS", "ENVIRONMENT", "EXAMPLES"]) {
      expect(help.stdout).toContain(section)
    }
    for (const command of ["inspect", "list", "watch", "unlock"]) expect(help.stdout).toContain(`- ${command}`)
    expect(help.stdout).toContain("REDIS_URL")
    const sub = await cli(["unlock", "--help"])
    expect(sub.code).toBe(0)
    expect(sub.stdout).toContain("--force")
  })

  it("inspect: a free lock is an object with no holder and a null TTL, exit 0", async () => {
    const run = await cli(["inspect", "free:1", "--url", server.url, "--json"])
    expect(run).toMatchObject({ code: 0, stderr: "" })
    const lines = run.stdout.trim().split("\n")
    expect(lines).toHaveLength(1)
    const parsed = JSON.parse(lines[0]!) as Record<string, unknown>
    expect(Object.keys(parsed)).toEqual(contract)
    expect(parsed).toEqual({
      key: "free:1",
      kind: "none",
      holders: [],
      ttlMillis: null,
      fencingToken: null,
      waiters: 0
    })
  })

  it("inspect: the holder, its hold count, the TTL, the fencing token and the waiters of a held lock", async () => {
    const holder = runtime()
    const waiter = runtime()
    const { lease, release } = await hold(holder, "orders:42")
    // A second backend waits for the lock: its subscriber connection is the waiter Redis sees.
    const waiting = waiter.runFork(Effect.scoped(Lock.acquire("orders:42", { lease: "30 seconds" })))
    while (
      Number(((await admin.call("PUBSUB", "NUMSUB", "redisson_lock__channel:{orders:42}")) as Array<number>)[1]) === 0
    ) {
      await new Promise((r) => setTimeout(r, 20))
    }
    const run = await cli(["inspect", "orders:42", "--url", server.url, "--json"])
    expect(run).toMatchObject({ code: 0, stderr: "" })
    const parsed = JSON.parse(run.stdout) as {
      holders: Array<{ owner: string; count: number }>
      ttlMillis: number
      fencingToken: string
    }
    expect(Object.keys(parsed)).toEqual(contract)
    const owners = Object.keys((await admin.hgetall("orders:42")) as Record<string, string>)
    expect(parsed).toMatchObject({
      key: "orders:42",
      kind: "lock",
      fencingToken: String(lease.fencingToken),
      waiters: 1
    })
    expect(parsed.holders).toEqual([{ owner: owners[0], count: 1 }])
    expect(parsed.ttlMillis).toBeGreaterThan(0)
    expect(parsed.ttlMillis).toBeLessThanOrEqual(30_000)
    const text = await cli(["inspect", "orders:42", "--url", server.url])
    expect(text.stdout).toContain(`holder:   ${owners[0]} (held 1 time)`)
    expect(text.stdout).toContain(`token:    ${lease.fencingToken}`)
    await release()
    await waiter.runPromise(Fiber.join(waiting))
  })

  it("list: lock-shaped keys only (Redisson's included), sorted, one JSON object per line, filtered by pattern", async () => {
    const holder = runtime()
    const a = await hold(holder, "list:a")
    const b = await hold(holder, "list:b")
    // A lock as Redisson writes it (owner "<uuid>:<thread id>"), and data that must not be listed.
    await admin.hset("list:redisson", "8f0c6a2e-1b7d-4c1e-9d57-3a1f0e6b2c44:1", "2")
    await admin.pexpire("list:redisson", 600_000)
    await admin.hset("list:profile", "name", "Ada")
    await admin.set("list:counter", "3")
    const run = await cli(["list", "list:*", "--url", server.url, "--json"])
    expect(run).toMatchObject({ code: 0, stderr: "" })
    const locks = run.stdout.trim().split("\n").map((line) => JSON.parse(line) as Record<string, unknown>)
    expect(locks.map((lock) => lock.key)).toEqual(["list:a", "list:b", "list:redisson"])
    for (const lock of locks) expect(Object.keys(lock)).toEqual(contract)
    expect(locks[2]).toMatchObject({
      kind: "lock",
      holders: [{ owner: "8f0c6a2e-1b7d-4c1e-9d57-3a1f0e6b2c44:1", count: 2 }]
    })
    const only = await cli(["list", "list:b*", "--url", server.url, "--json"])
    expect(only.stdout.trim().split("\n").map((line) => (JSON.parse(line) as { key: string }).key)).toEqual(["list:b"])
    const table = await cli(["list", "list:*", "--url", server.url])
    expect(table.stdout.split("\n")[0]).toMatch(/^KEY\s+KIND\s+HOLDER\s+HOLDS\s+TTL\s+TOKEN\s+WAITERS$/)
    expect(table.stdout).toContain("list:redisson")
    await a.release()
    await b.release()
    await admin.del("list:redisson", "list:profile", "list:counter")
    const none = await cli(["list", "list:*", "--url", server.url, "--json"])
    expect(none).toMatchObject({ code: 0, stdout: "" })
  })

  it("--prefix: names are given and shown without the prefix the services use", async () => {
    const prefixed = runtime({ prefix: "locks:" })
    const { release } = await hold(prefixed, "invoices:7")
    const run = await cli(["inspect", "invoices:7", "--url", server.url, "--prefix", "locks:", "--json"])
    expect(JSON.parse(run.stdout)).toMatchObject({ key: "invoices:7", kind: "lock" })
    const listed = await cli(["list", "--url", server.url, "--prefix", "locks:", "--json"])
    expect(listed.stdout.trim().split("\n").map((line) => (JSON.parse(line) as { key: string }).key)).toEqual([
      "invoices:7"
    ])
    await release()
  })

  it("unlock --force --yes deletes the lock, publishes the release and the waiter gets in at once", async () => {
    const holder = runtime()
    const waiter = runtime()
    const { release } = await hold(holder, "stuck")
    const subscriber = new Redis(server.url, { connectionName: "test-admin" }).on("error", () => {})
    onTestFinished(() => subscriber.disconnect())
    const messages: Array<string> = []
    subscriber.on("message", (_channel: string, message: string) => messages.push(message))
    await subscriber.subscribe("redisson_lock__channel:{stuck}")
    // The waiter's own retry schedule would not try again for up to a second; the lease has 30 s.
    const got = await waiter.runPromise(Deferred.make<void>())
    const waiting = waiter.runFork(
      Effect.scoped(
        Effect.zipRight(Lock.acquire("stuck", { lease: "30 seconds" }), Deferred.succeed(got, undefined))
      )
    )
    while (Number(((await admin.call("PUBSUB", "NUMSUB", "redisson_lock__channel:{stuck}")) as Array<number>)[1]) < 2) {
      await new Promise((r) => setTimeout(r, 20))
    }
    const run = await cli(["unlock", "stuck", "--force", "--yes", "--url", server.url, "--json"])
    expect(run).toMatchObject({ code: 0, stderr: "" })
    expect(JSON.parse(run.stdout)).toMatchObject({ key: "stuck", unlocked: true, woke: 2 })
    // The first message is the forced release (the waiter's own release may follow).
    expect(messages[0]).toBe("0")
    await waiter.runPromise(Deferred.await(got))
    await waiter.runPromise(Fiber.join(waiting))
    await holder.runPromise(Effect.ignore(Effect.promise(release)))
  })

  it("unlock --force on a read-write lock publishes on its own channel too, so a waiting writer gets in at once", async () => {
    const holder = runtime()
    const waiter = runtime()
    const scope = await holder.runPromise(Scope.make())
    await holder.runPromise(Scope.extend(ReadWriteLock.acquireRead("shared", { lease: "30 seconds" }), scope))
    const subscriber = new Redis(server.url, { connectionName: "test-admin" }).on("error", () => {})
    onTestFinished(() => subscriber.disconnect())
    const messages: Array<string> = []
    subscriber.on("message", (channel: string, message: string) => messages.push(`${channel} ${message}`))
    await subscriber.subscribe("redisson_rwlock:{shared}")
    const got = await waiter.runPromise(Deferred.make<void>())
    const waiting = waiter.runFork(
      Effect.scoped(
        Effect.zipRight(ReadWriteLock.acquireWrite("shared", { lease: "30 seconds" }), Deferred.succeed(got, undefined))
      )
    )
    // The writer listens on the read-write lock's channel (the test's subscriber is the other one).
    while (Number(((await admin.call("PUBSUB", "NUMSUB", "redisson_rwlock:{shared}")) as Array<number>)[1]) < 2) {
      await new Promise((r) => setTimeout(r, 20))
    }
    const run = await cli(["unlock", "shared", "--force", "--yes", "--url", server.url, "--json"])
    expect(run).toMatchObject({ code: 0, stderr: "" })
    expect(JSON.parse(run.stdout)).toMatchObject({ key: "shared", unlocked: true, woke: 2 })
    expect(messages[0]).toBe("redisson_rwlock:{shared} 0")
    await waiter.runPromise(Deferred.await(got))
    await waiter.runPromise(Fiber.join(waiting))
    await holder.runPromise(Effect.ignore(Scope.close(scope, Exit.void)))
  })

  it("unlock refuses without --force (2), without confirmation off a terminal (4), on a free name (3) and on data (6)", async () => {
    const holder = runtime()
    const { release } = await hold(holder, "guarded")
    await admin.set("plain-data", "keep me")
    const [noForce, noConfirm, free, data, inspected, usage] = await Promise.all([
      cli(["unlock", "guarded", "--url", server.url]),
      cli(["unlock", "guarded", "--force", "--url", server.url]),
      cli(["unlock", "nothing-here", "--force", "--yes", "--url", server.url]),
      cli(["unlock", "plain-data", "--force", "--yes", "--url", server.url]),
      cli(["inspect", "plain-data", "--url", server.url]),
      cli(["inspect", "--url", server.url])
    ])
    expect(noForce.code).toBe(2)
    expect(noForce.stderr).toMatch(/--force/)
    expect(noConfirm.code).toBe(4)
    expect(noConfirm.stderr).toMatch(/--yes/)
    expect(await admin.exists("guarded")).toBe(1)
    expect(free.code).toBe(3)
    expect(data.code).toBe(6)
    expect(await admin.get("plain-data")).toBe("keep me")
    expect(inspected.code).toBe(6)
    expect(usage.code).toBe(2)
    await release()
  })

  it("a connection failure exits 5 with one line on stderr naming the host, never the password", async () => {
    const port = await freePort()
    const secret = "hunter2-very-secret"
    const secure = `redis://:${secret}@127.0.0.1:${guarded.port}`
    const [refused, fromEnv, wrong, right] = await Promise.all([
      cli(["inspect", "k", "--url", `redis://admin:${secret}@127.0.0.1:${port}`]),
      cli(["list"], { REDIS_URL: `redis://:${secret}@127.0.0.1:${port}/0` }),
      // A server that refuses the password: the same, and its answer says why.
      cli(["inspect", "k", "--url", secure]),
      cli(["inspect", "k", "--json"], { REDIS_URL: `redis://:s3cret-pw@127.0.0.1:${guarded.port}` })
    ])
    for (const run of [refused, fromEnv]) {
      expect(run.code).toBe(5)
      expect(run.stdout).toBe("")
      expect(run.stderr.trimEnd().split("\n")).toHaveLength(1)
      expect(run.stderr).toContain(`127.0.0.1:${port}`)
      expect(run.stderr).not.toContain(secret)
    }
    expect(wrong.code).toBe(5)
    expect(wrong.stderr.trimEnd().split("\n")).toHaveLength(1)
    expect(wrong.stderr).toContain(`127.0.0.1:${guarded.port}`)
    expect(wrong.stderr).toMatch(/WRONGPASS|invalid|password/i)
    expect(wrong.stderr).not.toContain(secret)
    expect(right.code).toBe(0)
    expect(right.stdout + right.stderr).not.toContain("s3cret-pw")
    const invalid = await cli(["inspect", "k", "--url", `http://user:${secret}@somewhere`])
    expect(invalid.code).toBe(2)
    expect(invalid.stderr).not.toContain(secret)
  })

  it("watch --json off a terminal: one line per change; SIGINT leaves with 0", async () => {
    const child = spawn(
      process.execPath,
      [bin, "watch", "json:*", "--url", server.url, "--json", "--interval", "200"],
      {
        cwd: root,
        env: { ...process.env, NO_COLOR: "1" },
        stdio: ["ignore", "pipe", "pipe"]
      }
    )
    let stdout = ""
    let stderr = ""
    child.stdout.setEncoding("utf8").on("data", (chunk: string) => (stdout += chunk))
    child.stderr.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk))
    const closed = new Promise<number | null>((r) => child.once("close", (code) => r(code)))
    const until = async (check: () => boolean, what: string) => {
      const deadline = Date.now() + 30_000
      while (!check()) {
        if (Date.now() > deadline) throw new Error(`no ${what}: stdout ${stdout} stderr ${stderr}`)
        await new Promise((r) => setTimeout(r, 50))
      }
    }
    // Subscribed once it has connected twice (commands and subscriber).
    await until(
      () =>
        stderr.length > 0 ||
        /name=effect-lock-cli-watch/.test(
          spawnSync("redis-cli", ["-p", String(server.port), "CLIENT", "LIST"]).stdout.toString()
        ),
      "subscriber"
    )
    const holder = runtime()
    const { lease, release } = await hold(holder, "json:1")
    await until(() => stdout.includes("\"acquired\""), "acquired line")
    await release()
    await until(() => stdout.includes("\"released\""), "released line")
    child.kill("SIGINT")
    expect(await closed).toBe(0)
    const events = stdout.trim().split("\n").map((line) => JSON.parse(line) as Record<string, unknown>)
    expect(events.map((e) => e.event)).toEqual(["acquired", "released"])
    expect(events[0]).toMatchObject({ key: "json:1", fencingToken: String(lease.fencingToken) })
  })
})

describe.skipIf(skip)("effect-lock CLI when Redis stops answering", () => {
  it("watch leaves soon after SIGINT even when the server never answers QUIT (the wait is interrupted, then a hard disconnect)", async () => {
    const frozen = await startRedisServer({ args: ["--enable-debug-command", "yes"] })
    onTestFinished(() => frozen.stop())
    const sleeper = new Redis(frozen.url, { connectionName: "test-admin" }).on("error", () => {})
    onTestFinished(() => sleeper.disconnect())
    const child = spawn(process.execPath, [bin, "watch", "--url", frozen.url, "--json", "--interval", "600000"], {
      cwd: root,
      env: { ...process.env, NO_COLOR: "1" },
      stdio: ["ignore", "pipe", "pipe"]
    })
    let stderr = ""
    child.stderr.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk))
    const exited = new Promise<string>((r) => child.once("close", (code) => r(`cli exited ${code}`)))
    // Subscribed: both of its connections are up.
    const deadline = Date.now() + 30_000
    while (
      ((await sleeper.call("CLIENT", "LIST")) as string).split("\n").filter((line) => /name=effect-lock-cli/.test(line))
        .length < 2
    ) {
      if (Date.now() > deadline) throw new Error(`watch did not connect: ${stderr}`)
      await new Promise((r) => setTimeout(r, 50))
    }
    // The whole server sleeps 10 s: QUIT gets no reply until then.
    const woke = (sleeper.call("DEBUG", "SLEEP", "10") as Promise<unknown>).then(() => "server woke")
    await new Promise((r) => setTimeout(r, 300))
    child.kill("SIGINT")
    // Leaving waits at most a second for QUIT's reply, not for the server.
    expect(await Promise.race([woke, exited])).toBe("cli exited 0")
    await woke
  })
})

// --- watch in a pseudo-terminal --------------------------------------------------------------------

const hasTmux = spawnSync("sh", ["-c", "command -v tmux"]).status === 0
if (!hasTmux && process.env.CI === "true") throw new Error("the watch test needs tmux under CI=true")

describe.skipIf(skip || !hasTmux)("effect-lock watch in a terminal (tmux)", () => {
  const socket = `effect-lock-test-${process.pid}`
  const tmux = (...args: Array<string>) => spawnSync("tmux", ["-L", socket, ...args], { encoding: "utf8" })
  const screen = () => tmux("capture-pane", "-p", "-t", "watch").stdout
  const until = async (check: (text: string) => boolean, what: string) => {
    const deadline = Date.now() + 30_000
    let text = screen()
    while (!check(text)) {
      if (Date.now() > deadline) throw new Error(`the screen never showed ${what}:\n${text}`)
      await new Promise((r) => setTimeout(r, 100))
      text = screen()
    }
    return text
  }

  afterAll(() => {
    // Only this test's tmux server (its own socket).
    tmux("kill-server")
  })

  it("shows held locks and acquisitions, releases and expiries as they happen; Ctrl-C leaves with 0", async () => {
    // bash runs the command and records its exit status: tmux does not always learn it (it can mark
    // the pane dead, its terminal closed, without ever reporting the status). bash waits out a
    // child that handles Ctrl-C itself, so the status written is the command's own.
    const statusFile = join(build, `watch-exit-${process.pid}`)
    rmSync(statusFile, { force: true })
    const command =
      `bash -c "${process.execPath} ${bin} watch 'tty:*' --url ${server.url} --interval 250; echo \\$? > ${statusFile}"`
    const started = tmux("new-session", "-d", "-s", "watch", "-x", "160", "-y", "40", command)
    expect(started.status).toBe(0)
    tmux("set-option", "-t", "watch", "remain-on-exit", "on")
    const first = await until((text) => text.includes("no locks held"), "the empty table")
    expect(first).toContain("effect-lock watch tty:* on 127.0.0.1:")
    expect(first).toContain("keyspace events")

    const holder = runtime()
    const { lease, release } = await hold(holder, "tty:orders")
    const owner = Object.keys(await admin.hgetall("tty:orders"))[0]!
    const header = /^KEY\s+KIND\s+HOLDER\s+HOLDS\s+TTL\s+TOKEN\s+WAITERS$/m
    const row = new RegExp(`^tty:orders\\s+lock\\s+${owner}\\s+1\\s+[\\d.]+ s\\s+${lease.fencingToken}\\s+0$`, "m")
    // The change line and the table row may reach the screen in different refreshes.
    const held = await until(
      (text) => text.includes("acquired by") && header.test(text) && row.test(text),
      "the acquisition in the change list and in the table"
    )
    expect(held).toMatch(header)
    expect(held).toMatch(row)
    expect(held).toContain(`tty:orders  acquired by ${owner} (token ${lease.fencingToken})`)

    await release()
    await until((text) => text.includes("tty:orders  released"), "the release")

    // A Redisson-shaped lock whose lease runs out.
    await admin.hset("tty:short", "0d6c3b1a-7e2f-4a5b-8c9d-1e2f3a4b5c6d:7", "1")
    await admin.pexpire("tty:short", 400)
    await until((text) => text.includes("tty:short  acquired by"), "the short lock")
    const expired = await until(
      (text) => text.includes("tty:short  expired") && text.includes("no locks held"),
      "the expiry, and the table empty again"
    )
    expect(expired).toContain("no locks held")

    tmux("send-keys", "-t", "watch", "C-c")
    const deadline = Date.now() + 30_000
    while (!existsSync(statusFile) || readFileSync(statusFile, "utf8").trim() === "") {
      if (Date.now() > deadline) throw new Error(`watch did not exit on Ctrl-C:\n${screen()}`)
      await new Promise((r) => setTimeout(r, 100))
    }
    expect(readFileSync(statusFile, "utf8").trim()).toBe("0")
    // The alternate screen is left: the table is gone from the terminal.
    expect(screen()).not.toContain("recent changes:")
  })
})
