/**
 * Cross-process contention, measured: what a user running several instances on one Redis sees.
 * The figures the README and docs quote for "across processes" come from this script.
 *
 *   npx tsx bench/cross-process.ts              # starts its own redis-server on a free port
 *   REDIS_URL=redis://127.0.0.1:6379 npx tsx bench/cross-process.ts   # or uses that one
 *
 * Knobs (environment): `XP_PROCESSES` (3), `XP_FIBERS` per process (1), `XP_ROUNDS` of the loop (3),
 * `XP_SECONDS` per loop (5),
 * `XP_HOLD_MS` (1; 0 allowed), `XP_HOLDS` (the holds a lone waiter waits out, ms, default
 * `200,1000,5000`; empty to skip), `XP_REPS` (3 per hold).
 *
 * Two measurements, each with one fiber per OS process (`withLock` on `RedisBackend.layer`,
 * default options):
 *
 * 1. **Loop**: `XP_PROCESSES` processes loop `withLock(key, sleep XP_HOLD_MS)` on one key for
 *    `XP_SECONDS`. Grants are put in order by their fencing tokens (which increase in grant order),
 *    so the script reports grants per process, fairness (fewest grants of a process / most), the
 *    share of grants that went back to the process that had the previous one ("re-grabs"), and
 *    acquisition attempts (`acquire.lua` calls) per grant and, on a server of its own, the commands
 *    the processes sent per grant (scripts, SUBSCRIBE, UNSUBSCRIBE). For contrast, the same loop with as many fibers in one process.
 * 2. **A lone waiter**: process A holds the key for T ms; process B asks for it right after A got
 *    it and waits with the default retry schedule. The script counts B's attempts.
 *
 * Attempts are counted by wrapping `evalsha` on the ioredis client each process gives its backend
 * (`RedisBackend.layer({ client })`) and counting calls with acquire.lua's SHA. Every key the run
 * creates (locks, fencing counters) is deleted at the end.
 */
import { Effect, ManagedRuntime } from "effect"
import { Redis } from "ioredis"
import { type ChildProcess, spawn } from "node:child_process"
import { createHash, randomUUID } from "node:crypto"
import { readFileSync } from "node:fs"
import { cpus, loadavg } from "node:os"
import { createInterface } from "node:readline"
import { fileURLToPath } from "node:url"
import { withLock } from "../src/Lock.js"
import * as RedisBackend from "../src/RedisBackend.js"
import { startRedisServer } from "../test/support/redisServer.js"

const intFromEnv = (name: string, fallback: number): number => {
  const value = Number(process.env[name])
  return Number.isInteger(value) && value > 0 ? value : fallback
}

type Command =
  | { readonly op: "hold"; readonly key: string; readonly millis: number }
  | { readonly op: "wait"; readonly key: string }
  | {
    readonly op: "loop"
    readonly key: string
    readonly seconds: number
    readonly holdMs: number
    readonly fibers: number
  }
  | { readonly op: "exit" }

interface Grant {
  readonly process: number
  readonly token: string
}

// ---------------------------------------------------------------------------------------------
// The child: one backend on its own client, obeying one JSON command per line on stdin.
// ---------------------------------------------------------------------------------------------
const child = async (url: string, index: number) => {
  const acquireSha = createHash("sha1")
    .update(readFileSync(new URL("../lua/acquire.lua", import.meta.url), "utf8"))
    .digest("hex")
  const client = new Redis(url)
  let attempts = 0
  const evalsha = client.evalsha.bind(client) as (...args: Array<unknown>) => Promise<unknown>
  Object.assign(client, {
    evalsha: (...args: Array<unknown>) => {
      if (args[0] === acquireSha) attempts++
      return evalsha(...args)
    }
  })
  const runtime = ManagedRuntime.make(RedisBackend.layer({ client }))
  await runtime.runPromise(Effect.void)
  const say = (message: object) => process.stdout.write(JSON.stringify(message) + "\n")
  say({ ready: index })
  for await (const line of createInterface({ input: process.stdin })) {
    const command = JSON.parse(line) as Command
    switch (command.op) {
      case "hold": {
        await runtime.runPromise(
          withLock(
            command.key,
            Effect.zipRight(Effect.sync(() => say({ held: command.key })), Effect.sleep(command.millis))
          )
        )
        say({ released: command.key })
        break
      }
      case "wait": {
        const before = attempts
        const start = performance.now()
        await runtime.runPromise(withLock(command.key, Effect.void))
        say({ attempts: attempts - before, waitedMs: performance.now() - start })
        break
      }
      case "loop": {
        const before = attempts
        const grants: Array<string> = []
        const stopAt = performance.now() + command.seconds * 1000
        const fiber = (n: number) =>
          Effect.whileLoop({
            while: () => performance.now() < stopAt,
            body: () =>
              withLock(command.key, (lease) =>
                Effect.zipRight(
                  Effect.sync(() => grants.push(`${n}:${lease.fencingToken}`)),
                  Effect.sleep(command.holdMs)
                )),
            step: () => undefined
          })
        await runtime.runPromise(
          Effect.forEach(Array.from({ length: command.fibers }, (_, n) => n), fiber, {
            concurrency: "unbounded",
            discard: true
          })
        )
        say({ grants, attempts: attempts - before })
        break
      }
      case "exit": {
        await runtime.dispose()
        await client.quit()
        process.exit(0)
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// The parent: starts the processes, drives the two measurements, prints the figures.
// ---------------------------------------------------------------------------------------------
interface Handle {
  readonly child: ChildProcess
  readonly send: (command: Command) => void
  /** The next JSON line the child prints that has `field`. */
  readonly next: <A>(field: string) => Promise<A>
}

const startChild = (url: string, index: number): Promise<Handle> =>
  new Promise((resolve, reject) => {
    const proc = spawn(process.execPath, [...process.execArgv, fileURLToPath(import.meta.url)], {
      env: { ...process.env, XP_CHILD: String(index), XP_URL: url },
      stdio: ["pipe", "pipe", "inherit"]
    })
    const waiting: Array<{ readonly field: string; readonly resolve: (value: never) => void }> = []
    const backlog: Array<Record<string, unknown>> = []
    const lines = createInterface({ input: proc.stdout! })
    lines.on("line", (line) => {
      const message = JSON.parse(line) as Record<string, unknown>
      const at = waiting.findIndex((w) => w.field in message)
      if (at >= 0) waiting.splice(at, 1)[0]!.resolve(message as never)
      else backlog.push(message)
    })
    const next = <A>(field: string) =>
      new Promise<A>((res) => {
        const at = backlog.findIndex((m) => field in m)
        if (at >= 0) res(backlog.splice(at, 1)[0] as A)
        else waiting.push({ field, resolve: res as (value: never) => void })
      })
    proc.once("exit", (code) => {
      if (code !== 0) reject(new Error(`process ${index} exited with ${code}`))
    })
    const handle: Handle = { child: proc, send: (command) => proc.stdin!.write(JSON.stringify(command) + "\n"), next }
    next("ready").then(() => resolve(handle), reject)
  })

const pct = (n: number) => `${Math.round(n * 100)} %`

/** Fairness and re-grabs of a run, grants ordered by fencing token. */
const analyse = (grants: ReadonlyArray<Grant>, groups: number) => {
  const ordered = [...grants].sort((a, b) => (BigInt(a.token) < BigInt(b.token) ? -1 : 1))
  const per = Array.from({ length: groups }, (_, i) => ordered.filter((g) => g.process === i).length)
  const regrabs = ordered.filter((g, i) => i > 0 && g.process === ordered[i - 1]!.process).length
  return {
    total: ordered.length,
    per,
    fairness: Math.min(...per) / Math.max(...per),
    regrabs: ordered.length > 1 ? regrabs / (ordered.length - 1) : 0
  }
}

const parent = async () => {
  const PROCESSES = intFromEnv("XP_PROCESSES", 3)
  const SECONDS = intFromEnv("XP_SECONDS", 5)
  const HOLD_MS = Number(process.env["XP_HOLD_MS"] ?? 1)
  const REPS = intFromEnv("XP_REPS", 3)
  const FIBERS = intFromEnv("XP_FIBERS", 1)
  const ROUNDS = intFromEnv("XP_ROUNDS", 3)
  const HOLDS = (process.env["XP_HOLDS"] ?? "200,1000,5000").split(",").map(Number).filter((n) => n > 0)
  const given = process.env["REDIS_URL"]
  const server = given !== undefined && given !== "" ? undefined : await startRedisServer()
  const url = server?.url ?? given!
  const run = `xp:${randomUUID().slice(0, 8)}`
  const handles: Array<Handle> = []
  const admin = new Redis(url)
  try {
    handles.push(...await Promise.all(Array.from({ length: PROCESSES }, (_, i) => startChild(url, i))))
    const redisVersion = /redis_version:(\S+)/.exec(await admin.info("server"))?.[1]
    console.log(
      `cross-process contention: ${PROCESSES} processes, Redis ${redisVersion} at ${url}, ` +
        `node ${process.version}, ${cpus().length} cores, load average ${loadavg()[0]!.toFixed(1)}`
    )

    // Commands the server ran, by name (only on a server of our own: it resets the statistics).
    const resetStats = () => (server === undefined ? Promise.resolve() : admin.config("RESETSTAT").then(() => {}))
    const commandsPer = async (grants: number) => {
      if (server === undefined) return ""
      // The commands the clients sent; the server also counts the ones scripts run, left out here.
      const sent = new Set(["evalsha", "eval", "subscribe", "unsubscribe"])
      const stats = [...(await admin.info("commandstats")).matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)]
        .map(([, name, calls]) => [name!, Number(calls)] as const)
        .filter(([name]) => sent.has(name))
      const total = stats.reduce((n, [, calls]) => n + calls, 0)
      return `; commands per grant ${(total / grants).toFixed(2)} (${
        stats.map(([name, calls]) => `${name} ${(calls / grants).toFixed(2)}`).join(", ")
      })`
    }

    // 1. Loops on one key: several processes, then as many fibers in one process.
    console.log(`\n1. loop on one key for ${SECONDS} s, hold ${HOLD_MS} ms, ${FIBERS} fiber(s) per process`)
    for (let round = 1; round <= ROUNDS; round++) {
      const loopKey = `${run}:loop-${round}`
      await resetStats()
      for (const h of handles) h.send({ op: "loop", key: loopKey, seconds: SECONDS, holdMs: HOLD_MS, fibers: FIBERS })
      const results = await Promise.all(
        handles.map((h) => h.next<{ grants: Array<string>; attempts: number }>("grants"))
      )
      const grants = results.flatMap((r, i) => r.grants.map((g) => ({ process: i, token: g.split(":")[1]! })))
      const across = analyse(grants, PROCESSES)
      const attempts = results.reduce((n, r) => n + r.attempts, 0)
      console.log(
        `   ${PROCESSES} processes: ${across.total} grants (${across.per.join(" / ")}), fairness ` +
          `${across.fairness.toFixed(2)}, re-grabs ${pct(across.regrabs)}, ` +
          `attempts per grant ${(attempts / across.total).toFixed(2)}${await commandsPer(across.total)}`
      )

      const localKey = `${run}:loop-local-${round}`
      await resetStats()
      handles[0]!.send({ op: "loop", key: localKey, seconds: SECONDS, holdMs: HOLD_MS, fibers: PROCESSES })
      const local = await handles[0]!.next<{ grants: Array<string>; attempts: number }>("grants")
      const within = analyse(
        local.grants.map((g) => ({ process: Number(g.split(":")[0]), token: g.split(":")[1]! })),
        PROCESSES
      )
      console.log(
        `   1 process, ${PROCESSES} fibers: ${within.total} grants (${within.per.join(" / ")}), fairness ` +
          `${within.fairness.toFixed(2)}, re-grabs ${pct(within.regrabs)}, ` +
          `attempts per grant ${(local.attempts / within.total).toFixed(2)}${await commandsPer(within.total)}`
      )
    }

    // 2. A lone waiter in another process.
    console.log(`\n2. a waiter in process 1 while process 0 holds the key (default retry schedule)`)
    for (const hold of HOLDS) {
      const samples: Array<{ attempts: number; waitedMs: number }> = []
      for (let rep = 0; rep < REPS; rep++) {
        const key = `${run}:wait-${hold}-${rep}`
        handles[0]!.send({ op: "hold", key, millis: hold })
        await handles[0]!.next("held")
        handles[1]!.send({ op: "wait", key })
        samples.push(await handles[1]!.next<{ attempts: number; waitedMs: number }>("attempts"))
        await handles[0]!.next("released")
      }
      console.log(
        `   hold ${String(hold).padStart(5)} ms: attempts ${samples.map((s) => s.attempts).join(", ")}; ` +
          `waited ${samples.map((s) => `${Math.round(s.waitedMs)} ms`).join(", ")}`
      )
    }
  } finally {
    for (const h of handles) h.send({ op: "exit" })
    await Promise.all(handles.map((h) => new Promise((resolve) => h.child.once("exit", resolve))))
    // The locks are gone; their fencing counters never expire: delete them.
    let removed = 0
    for (const pattern of [`${run}:*`, `redisson_lock_token:{${run}:*`]) {
      for await (const keys of admin.scanStream({ match: pattern, count: 1000 })) {
        if ((keys as Array<string>).length > 0) removed += await admin.del(...(keys as Array<string>))
      }
    }
    console.log(`\ncleaned up ${removed} key(s) of the run`)
    await admin.quit()
    await server?.stop()
  }
}

const childIndex = process.env["XP_CHILD"]
if (childIndex !== undefined) {
  child(process.env["XP_URL"]!, Number(childIndex)).catch((error) => {
    console.error(error)
    process.exit(1)
  })
} else {
  parent().catch((error) => {
    console.error(error)
    process.exitCode = 1
  })
}
