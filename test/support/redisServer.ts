/**
 * Real `redis-server` processes for tests: each on a free loopback port, not daemonized, without
 * persistence, always stopped afterwards (scope close, `afterAll`, or process exit as a last
 * resort).
 *
 * Two forms: `redisServer()` is a scoped Effect resource; `startRedisServer()` is a plain promise
 * for vitest's `beforeAll` / `afterAll`.
 *
 * When `redis-server` is not on the PATH, Redis suites use `REDIS_URL` where they can (tests that
 * need their own server skip), and skip loudly when neither is available, except under `CI=true`,
 * where that fails the run.
 */
import { Effect } from "effect"
import type { Scope } from "effect"
import { type ChildProcess, spawn, spawnSync } from "node:child_process"
import { createServer, Socket } from "node:net"

export interface RedisServer {
  readonly host: string
  readonly port: number
  readonly url: string
  /** Whether this helper controls the process (false for a server given by `REDIS_URL`). */
  readonly controlled: boolean
  /** Stop the server (SIGTERM, then SIGKILL) and wait for it to exit. Idempotent. */
  readonly stop: () => Promise<void>
  /** Send a signal without waiting (e.g. "SIGKILL"). */
  readonly kill: (signal: NodeJS.Signals) => void
  /** SIGSTOP: the server keeps its connections open but answers nothing. */
  readonly pause: () => void
  /** SIGCONT. */
  readonly resume: () => void
  /** Stop the server and start a fresh one (empty data) on the same port. */
  readonly restart: () => Promise<void>
}

export interface RedisServerOptions {
  /** Extra `redis-server` arguments, e.g. `["--requirepass", "secret"]`. */
  readonly args?: ReadonlyArray<string> | undefined
}

const host = "127.0.0.1"

const findOnPath = (command: string): boolean =>
  spawnSync("sh", ["-c", `command -v ${command}`], { stdio: "ignore" }).status === 0

/** How Redis tests can run here: their own servers, a given `REDIS_URL`, or not at all. */
export const redisMode: "local" | "external" | "none" = findOnPath("redis-server")
  ? "local"
  : process.env.REDIS_URL
  ? "external"
  : "none"

/**
 * Call once at the top of every Redis test file. Returns `true` when the file's tests should be
 * skipped (and says so loudly); fails the run instead under `CI=true`.
 */
export const skipRedis = (needsOwnServer = false): boolean => {
  if (redisMode === "local" || (redisMode === "external" && !needsOwnServer)) return false
  const why = redisMode === "none"
    ? "neither redis-server is on the PATH nor REDIS_URL is set"
    : "this suite needs its own redis-server (it stops, pauses or counts connections) and only REDIS_URL is set"
  if (process.env.CI === "true") {
    throw new Error(`Redis tests cannot run under CI=true: ${why}`)
  }
  console.warn(`\n${"!".repeat(78)}\n!!! SKIPPING REDIS TESTS: ${why}\n${"!".repeat(78)}\n`)
  return true
}

const freePort = (): Promise<number> =>
  new Promise((resolve, reject) => {
    const server = createServer()
    server.unref()
    server.on("error", reject)
    server.listen(0, host, () => {
      const address = server.address()
      const port = typeof address === "object" && address !== null ? address.port : 0
      server.close(() => resolve(port))
    })
  })

const ping = (port: number): Promise<boolean> =>
  new Promise((resolve) => {
    const socket = new Socket()
    let answer = ""
    const done = (ok: boolean) => {
      socket.destroy()
      resolve(ok)
    }
    socket.setTimeout(500, () => done(false))
    socket.on("error", () => done(false))
    socket.on("data", (chunk) => {
      answer += chunk.toString()
      // A server with a password answers NOAUTH: it is up all the same.
      if (answer.includes("\r\n")) done(answer.startsWith("+PONG") || answer.startsWith("-NOAUTH"))
    })
    socket.connect(port, host, () => socket.write("PING\r\n"))
  })

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

const live = new Set<ChildProcess>()
process.once("exit", () => {
  for (const child of live) child.kill("SIGKILL")
})

const exited = (child: ChildProcess): Promise<void> =>
  child.exitCode !== null || child.signalCode !== null
    ? Promise.resolve()
    : new Promise((resolve) => child.once("exit", () => resolve()))

const spawnServer = async (port: number, args: ReadonlyArray<string>): Promise<ChildProcess> => {
  const child = spawn(
    "redis-server",
    ["--port", String(port), "--bind", host, "--save", "", "--appendonly", "no", "--loglevel", "warning", ...args],
    { stdio: ["ignore", "pipe", "pipe"] }
  )
  live.add(child)
  child.once("exit", () => live.delete(child))
  let output = ""
  child.stdout?.on("data", (chunk) => (output += chunk))
  child.stderr?.on("data", (chunk) => (output += chunk))
  let spawnError: Error | undefined
  child.once("error", (error) => (spawnError = error))
  for (let attempt = 0; attempt < 200; attempt++) {
    if (spawnError !== undefined) throw spawnError
    if (child.exitCode !== null) {
      throw new Error(`redis-server on port ${port} exited with ${child.exitCode}: ${output}`)
    }
    if (await ping(port)) return child
    await sleep(25)
  }
  child.kill("SIGKILL")
  throw new Error(`redis-server on port ${port} did not answer PING: ${output}`)
}

const terminate = async (child: ChildProcess): Promise<void> => {
  if (child.exitCode !== null || child.signalCode !== null) return
  child.kill("SIGCONT") // a paused server cannot handle SIGTERM
  child.kill("SIGTERM")
  const timer = setTimeout(() => child.kill("SIGKILL"), 3000)
  await exited(child)
  clearTimeout(timer)
}

const external = (url: string): RedisServer => {
  const parsed = new URL(url)
  const unsupported = (what: string) => () => {
    throw new Error(`${what} needs a redis-server started by the tests, not REDIS_URL`)
  }
  return {
    host: parsed.hostname,
    port: Number(parsed.port || 6379),
    url,
    controlled: false,
    stop: () => Promise.resolve(),
    kill: unsupported("kill"),
    pause: unsupported("pause"),
    resume: unsupported("resume"),
    restart: unsupported("restart")
  }
}

/**
 * Start a `redis-server` on a free loopback port and wait until it answers PING. Under
 * `redisMode === "external"` returns the `REDIS_URL` server, which cannot be controlled.
 */
export const startRedisServer = async (options: RedisServerOptions = {}): Promise<RedisServer> => {
  if (redisMode === "external") return external(process.env.REDIS_URL!)
  const args = options.args ?? []
  let port = 0
  let child: ChildProcess | undefined
  // Another process can take the port between probing and binding: try a few.
  for (let attempt = 0; child === undefined; attempt++) {
    port = await freePort()
    try {
      child = await spawnServer(port, args)
    } catch (error) {
      if (attempt >= 4) throw error
    }
  }
  let current: ChildProcess = child
  return {
    host,
    port,
    url: `redis://${host}:${port}`,
    controlled: true,
    stop: () => terminate(current),
    kill: (signal) => {
      current.kill(signal)
    },
    pause: () => {
      current.kill("SIGSTOP")
    },
    resume: () => {
      current.kill("SIGCONT")
    },
    restart: async () => {
      await terminate(current)
      current = await spawnServer(port, args)
    }
  }
}

/** `startRedisServer` as a scoped resource: the server stops when the scope closes. */
export const redisServer = (options: RedisServerOptions = {}): Effect.Effect<RedisServer, Error, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.tryPromise({
      try: () => startRedisServer(options),
      catch: (error) => error instanceof Error ? error : new Error(String(error))
    }),
    (server) => Effect.promise(() => server.stop())
  )
