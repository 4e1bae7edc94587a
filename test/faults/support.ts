/**
 * Shared pieces of the fault suite: the bounds every scenario is held to, a host-wide monotonic
 * clock, an admin connection that survives the faults, the "nothing unhandled" check, and lock
 * holders in OS processes of their own (`worker.ts`) driven over stdin/stdout.
 */
import { assert } from "@effect/vitest"
import { Effect } from "effect"
import type { Scope } from "effect"
import { Redis } from "ioredis"
import { type ChildProcessWithoutNullStreams, spawn } from "node:child_process"
import { connect, createServer, type Server, type Socket } from "node:net"
import { fileURLToPath } from "node:url"
import { vi } from "vitest"
import { unhandled } from "../support/failOnUnhandled.js"

/**
 * How late a timer-driven event may be, on top of the bound the library promises: event-loop and
 * OS scheduling on a loaded machine. Timing bounds are never tighter than this.
 */
export const SLACK_MILLIS = 250

/** Print a measurement when `FAULTS_VERBOSE` is set (to see how close to its bound a run came). */
export const measured = (label: string, millis: number): void => {
  if (process.env.FAULTS_VERBOSE) console.log(`[faults] ${label}: ${millis.toFixed(1)} ms`)
}

/** The drift margin the library subtracts from a lease: 1 % of the lease + 2 ms. */
export const driftOf = (leaseMillis: number) => Math.floor(leaseMillis * 0.01) + 2

/**
 * Milliseconds on `process.hrtime` (CLOCK_MONOTONIC on Linux): the clock Effect's live `Clock`
 * reads for deadlines, and one that every process on the host shares, so times reported by worker
 * processes compare with the test's.
 */
export const hrMillis = (): number => Number(process.hrtime.bigint() / 1000n) / 1000

/** `hrMillis` of a `process.hrtime.bigint()` reading reported by a worker. */
export const fromHr = (nanos: string): number => Number(BigInt(nanos) / 1000n) / 1000

/**
 * An admin connection for looking at and tampering with the server from outside. It keeps its
 * offline queue, so it rides out restarts; its error events are swallowed (the faults cause them).
 */
export const adminClient = (url: string): Effect.Effect<Redis, never, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.sync(() => new Redis(url, { connectionName: "test-admin", maxRetriesPerRequest: 20 }).on("error", () => {})),
    (redis) => Effect.sync(() => redis.disconnect())
  )

/** Run a command on the admin connection. */
export const cmd = <A = unknown>(redis: Redis, ...args: [string, ...Array<string | number>]) =>
  Effect.promise(() => redis.call(...args) as Promise<A>)

/** Every key on the server, sorted. */
export const keyspace = (redis: Redis) => Effect.map(cmd<Array<string>>(redis, "KEYS", "*"), (keys) => [...keys].sort())

/** Subscribers of `channel` on the server. */
export const numsub = (redis: Redis, channel: string) =>
  Effect.map(cmd<Array<string | number>>(redis, "PUBSUB", "NUMSUB", channel), (reply) => Number(reply[1]))

/** Poll `check` every 20 ms until it holds (a defect after `millis`). */
export const eventually = <E, R>(check: Effect.Effect<boolean, E, R>, millis: number, what: string) =>
  Effect.gen(function*() {
    const deadline = hrMillis() + millis
    while (!(yield* check)) {
      if (hrMillis() > deadline) return yield* Effect.dieMessage(`timed out after ${millis} ms waiting for ${what}`)
      yield* Effect.sleep(20)
    }
  })

/** Fail with a defect naming `what` if `effect` takes longer than `millis`. */
export const within = (millis: number, what: string) => <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.timeoutFail(effect, {
    duration: millis,
    onTimeout: () => new Error(`${what}: nothing after ${millis} ms`)
  }).pipe(Effect.orDie)

/**
 * Run a fault scenario and then check that nothing went unhandled while it ran: no unhandled
 * rejection or uncaught exception in this process (recorded by test/support/failOnUnhandled.ts,
 * which also fails the run on its own), no ioredis "Unhandled error event" (an error event with
 * no listener), and no unhandled rejection in any worker process the scenario started.
 */
export const faultScenario = <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R | Scope.Scope> =>
  Effect.gen(function*() {
    const consoleError = vi.spyOn(console, "error")
    yield* Effect.addFinalizer(() => Effect.sync(() => consoleError.mockRestore()))
    const before = workerUnhandled.length
    const result = yield* effect
    assert.deepStrictEqual(unhandled, [], "no unhandled rejection or uncaught exception in the test process")
    const unlistened = consoleError.mock.calls.filter((args) => String(args[0]).includes("Unhandled error event"))
    assert.deepStrictEqual(unlistened, [], "no ioredis error event without a listener")
    assert.deepStrictEqual(workerUnhandled.slice(before), [], "no unhandled rejection in a worker process")
    return result
  })

// --- worker processes ------------------------------------------------------------------------------

const workerScript = fileURLToPath(new URL("./worker.ts", import.meta.url))
const root = fileURLToPath(new URL("../..", import.meta.url))

/** One line a worker printed: an event, with `at` its `process.hrtime.bigint()`. */
export interface WorkerEvent {
  readonly ev: string
  readonly at: string
  readonly [field: string]: unknown
}

export type WorkerCommand =
  | { readonly op: "acquire"; readonly key: string; readonly lease: number; readonly retry?: number }
  | { readonly op: "step" }
  | { readonly op: "write"; readonly value: string }
  | { readonly op: "release" }
  | { readonly op: "inspect"; readonly key: string }
  | { readonly op: "loop"; readonly every: number }
  | { readonly op: "report" }

export interface Worker {
  readonly pid: number
  readonly child: ChildProcessWithoutNullStreams
  /** Write a command to the worker's stdin (it is buffered in the pipe while the worker is stopped). */
  readonly send: (command: WorkerCommand) => Effect.Effect<void>
  /** The next event named `ev` not taken yet, waiting up to `millis` for it. */
  readonly take: (ev: string, millis?: number) => Effect.Effect<WorkerEvent>
  /** Every event so far. */
  readonly events: ReadonlyArray<WorkerEvent>
  readonly signal: (signal: NodeJS.Signals) => void
  /** Resolves when the process has exited. */
  readonly exited: Promise<void>
}

const workerUnhandled: Array<string> = []

/**
 * Start a worker process on `url` and wait until it is connected. It is killed (SIGKILL) when the
 * scope closes. tsx start-up takes about a second; start the workers a scenario needs together.
 * With `redlockNodes`, its locks live on a `RedlockBackend` over those nodes (the fenced resource
 * stays at `url`).
 */
export const startWorker = (
  url: string,
  name: string,
  redlockNodes?: ReadonlyArray<string>
): Effect.Effect<Worker, never, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.suspend(() => {
      const args = [...(redlockNodes === undefined ? [] : [redlockNodes.join(",")])]
      const child = spawn(process.execPath, ["--import", "tsx", workerScript, url, ...args], {
        cwd: root,
        stdio: ["pipe", "pipe", "pipe"]
      })
      const events: Array<WorkerEvent> = []
      const taken = new Set<WorkerEvent>()
      const listeners = new Set<() => void>()
      let stdout = ""
      let stderr = ""
      let output = ""
      child.stderr.setEncoding("utf8")
      child.stderr.on("data", (chunk: string) => (stderr += chunk))
      child.stdout.setEncoding("utf8")
      child.stdout.on("data", (chunk: string) => {
        stdout += chunk
        let newline: number
        while ((newline = stdout.indexOf("\n")) >= 0) {
          const line = stdout.slice(0, newline)
          stdout = stdout.slice(newline + 1)
          output += line + "\n"
          // Other lines are the worker's Effect logs.
          if (!line.startsWith("{")) continue
          const event = JSON.parse(line) as WorkerEvent
          if (event.ev === "unhandled") workerUnhandled.push(`${name}: ${String(event.message)}`)
          events.push(event)
        }
        for (const listener of [...listeners]) listener()
      })
      // Writing to a worker that was killed must not become an unhandled error event.
      child.stdin.on("error", () => {})
      const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()))
      child.once("exit", () => {
        for (const listener of [...listeners]) listener()
      })
      const describe = () => `worker ${name} (pid ${child.pid})\n--- stdout\n${output}${stdout}\n--- stderr\n${stderr}`

      const take = (ev: string, millis = 15_000): Effect.Effect<WorkerEvent> =>
        Effect.async<WorkerEvent, Error>((resume) => {
          const check = () => {
            const event = events.find((e) => e.ev === ev && !taken.has(e))
            if (event !== undefined) {
              taken.add(event)
              listeners.delete(check)
              resume(Effect.succeed(event))
            } else if (child.exitCode !== null || child.signalCode !== null) {
              listeners.delete(check)
              resume(Effect.fail(new Error(`${describe()}\nexited before "${ev}"`)))
            }
          }
          listeners.add(check)
          check()
          return Effect.sync(() => listeners.delete(check))
        }).pipe(
          Effect.timeoutFail({
            duration: millis,
            onTimeout: () => new Error(`${describe()}\nno "${ev}" event within ${millis} ms`)
          }),
          Effect.orDie
        )

      const worker: Worker = {
        pid: child.pid!,
        child,
        send: (command) => Effect.sync(() => void child.stdin.write(JSON.stringify(command) + "\n")),
        take,
        events,
        signal: (signal) => {
          child.kill(signal)
        },
        exited
      }
      // tsx compiles the worker and its imports on start: allow for a loaded machine.
      return take("ready", 60_000).pipe(
        Effect.as(worker),
        Effect.onError(() => Effect.sync(() => child.kill("SIGKILL")))
      )
    }),
    (worker) =>
      Effect.promise(() => {
        worker.child.kill("SIGKILL")
        return worker.exited
      })
  )

// --- a TCP proxy to cut connections at chosen moments ----------------------------------------------

export interface TcpProxy {
  readonly url: string
  /** While true, the server's replies are swallowed: commands run, their answers never arrive. */
  dropReplies: boolean
  /** Cut every connection through the proxy (clients see their connection drop). */
  readonly cut: () => void
}

/** A loopback TCP proxy in front of `port`, closed with the scope. */
export const tcpProxy = (port: number): Effect.Effect<TcpProxy, never, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.async<{ readonly proxy: TcpProxy; readonly server: Server; readonly sockets: Set<Socket> }>((resume) => {
      const sockets = new Set<Socket>()
      const server = createServer((client) => {
        const upstream = connect(port, "127.0.0.1")
        for (const socket of [client, upstream]) {
          sockets.add(socket)
          socket.on("error", () => {})
          socket.on("close", () => {
            sockets.delete(socket)
            client.destroy()
            upstream.destroy()
          })
        }
        client.on("data", (chunk) => upstream.write(chunk))
        upstream.on("data", (chunk) => {
          if (!proxy.dropReplies) client.write(chunk)
        })
      })
      const proxy: TcpProxy = {
        url: "",
        dropReplies: false,
        cut: () => {
          for (const socket of sockets) socket.destroy()
        }
      }
      server.listen(0, "127.0.0.1", () => {
        const address = server.address()
        const listening = typeof address === "object" && address !== null ? address.port : 0
        Object.assign(proxy, { url: `redis://127.0.0.1:${listening}` })
        resume(Effect.succeed({ proxy, server, sockets }))
      })
    }),
    ({ server, sockets }) =>
      Effect.async<void>((resume) => {
        for (const socket of sockets) socket.destroy()
        server.close(() => resume(Effect.void))
      })
  ).pipe(Effect.map(({ proxy }) => proxy))
