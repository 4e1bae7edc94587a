/**
 * Real `redis-server` processes for tests: each on a free loopback port, not daemonized, without
 * persistence, started as an `@effect/platform` `Command` in a scope of its own, so the process is
 * stopped whenever that scope closes, however the test ends (success, failure, interruption).
 *
 * Two forms: `redisServer()` is a scoped Effect resource; `startRedisServer()` is a plain promise
 * for vitest's `beforeAll` / `afterAll` (its scope is closed by `stop()`). A process-exit hook
 * SIGKILLs whatever is still running as a last resort (the children run in process groups of
 * their own, so a dying test process would not take them down on its own).
 *
 * `redisProcess()` is the building block (one process, scoped) for helpers that start servers in
 * other shapes (cluster nodes, sentinels): pass the arguments and, for a sentinel, the command.
 *
 * When `redis-server` is not on the PATH, Redis suites use `REDIS_URL` where they can (tests that
 * need their own server skip), and skip loudly when neither is available, except under `CI=true`,
 * where that fails the run.
 */
import { Command } from "@effect/platform"
import type { CommandExecutor } from "@effect/platform"
import * as NodeContext from "@effect/platform-node/NodeContext"
import { Cause, Effect, ExecutionStrategy, Exit, Runtime, Scope, Stream } from "effect"
import { spawnSync } from "node:child_process"
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
  /** Extra environment variables of the process (e.g. libfaketime's, test/support/faketime.ts). */
  readonly env?: Readonly<Record<string, string>> | undefined
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

/** A loopback port that was free a moment ago (another process can still take it). */
export const freePort = (): Promise<number> =>
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

/** Whether a Redis server answers PING on `port` (NOAUTH counts: a server with a password is up). */
export const ping = (port: number): Promise<boolean> =>
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
      if (answer.includes("\r\n")) done(answer.startsWith("+PONG") || answer.startsWith("-NOAUTH"))
    })
    socket.connect(port, host, () => socket.write("PING\r\n"))
  })

// Last resort: the children run in process groups of their own (the executor spawns them
// detached), so nothing else stops them if this process exits without closing their scopes.
const live = new Set<number>()
process.once("exit", () => {
  for (const pid of live) {
    try {
      process.kill(pid, "SIGKILL")
    } catch {
      // already gone
    }
  }
})

// Real time, whatever Clock the caller runs on: under `it.effect` (TestClock) a server must still
// start and stop.
const sleep = (millis: number) =>
  Effect.async<void>((resume) => {
    const timer = setTimeout(() => resume(Effect.void), millis)
    return Effect.sync(() => clearTimeout(timer))
  })

const signal = (pid: number, name: NodeJS.Signals): void => {
  try {
    process.kill(pid, name)
  } catch {
    // already gone
  }
}

/** One running server process, as `redisProcess` gives it. */
export interface RedisProcess {
  readonly pid: number
  readonly port: number
  /** Everything the process wrote so far (stdout and stderr). */
  readonly output: () => string
}

export interface RedisProcessOptions {
  readonly port: number
  /** Arguments after the defaults (`--port`, `--bind 127.0.0.1`, no persistence, warnings only). */
  readonly args?: ReadonlyArray<string> | undefined
  /** The executable, `redis-server` by default (e.g. `redis-sentinel`). */
  readonly command?: string | undefined
  /** Arguments before the defaults (e.g. a config file path, which redis-server wants first). */
  readonly leadingArgs?: ReadonlyArray<string> | undefined
  /** Extra environment variables, on top of this process's. */
  readonly env?: Readonly<Record<string, string>> | undefined
}

/**
 * One `redis-server` process as a scoped `Command` resource: started, waited for until it answers
 * PING, and stopped when the scope closes (SIGCONT in case it was paused, SIGTERM, SIGKILL after
 * 3 s; the executor then reaps the process group).
 */
export const redisProcess = (
  options: RedisProcessOptions
): Effect.Effect<RedisProcess, Error, Scope.Scope | CommandExecutor.CommandExecutor> =>
  Effect.gen(function*() {
    const { port } = options
    const command = Command.make(
      options.command ?? "redis-server",
      ...(options.leadingArgs ?? []),
      ...["--port", String(port), "--bind", host, "--save", "", "--appendonly", "no", "--loglevel", "warning"],
      ...(options.args ?? [])
    ).pipe(Command.env(options.env ?? {}))
    const proc = yield* Command.start(command).pipe(
      Effect.mapError((error) => new Error(`cannot start ${options.command ?? "redis-server"}: ${error.message}`))
    )
    const pid = proc.pid
    live.add(pid)
    // Its output, for the error when it does not come up; the reader is forked before the
    // finaliser below, so it keeps reading while the server shuts down.
    let output = ""
    yield* Stream.merge(proc.stdout, proc.stderr).pipe(
      Stream.decodeText(),
      Stream.runForEach((chunk) => Effect.sync(() => (output += chunk))),
      Effect.ignore,
      Effect.forkScoped
    )
    // Added after the executor's own finaliser, so it runs first: a paused server cannot act on
    // the executor's SIGTERM, and one that ignores it must not hold the scope open.
    yield* Effect.addFinalizer(() =>
      Effect.gen(function*() {
        signal(pid, "SIGCONT")
        signal(pid, "SIGTERM")
        // Finalisers are uninterruptible, and so are the racers they fork: each must be made
        // interruptible to lose the race. (The wait for the exit once was not, so a server that
        // ignored SIGTERM held the scope for good: a replica still writing its first AOF after a
        // full sync logs "Writing initial AOF, can't exit." and drops the signal.)
        const exited = yield* Effect.raceFirst(
          Effect.as(Effect.interruptible(Effect.exit(proc.exitCode)), true),
          Effect.as(Effect.interruptible(sleep(3000)), false)
        )
        if (!exited) {
          signal(pid, "SIGKILL")
          yield* Effect.exit(proc.exitCode)
        }
        live.delete(pid)
      })
    )
    for (let attempt = 0; attempt < 200; attempt++) {
      if (!(yield* proc.isRunning)) {
        const code = yield* Effect.either(proc.exitCode)
        const how = code._tag === "Right" ? `with ${code.right}` : "on a signal"
        return yield* Effect.fail(new Error(`redis-server on port ${port} exited ${how}: ${output}`))
      }
      if (yield* Effect.promise(() => ping(port))) return { pid, port, output: () => output }
      yield* sleep(25)
    }
    return yield* Effect.fail(new Error(`redis-server on port ${port} did not answer PING: ${output}`))
  })

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
 * A server in the current scope. Each incarnation (the first, and one per `restart()`) lives in a
 * child scope of its own, closed by `stop()`/`restart()` or, at the latest, with the parent.
 */
const launch = (options: RedisServerOptions): Effect.Effect<RedisServer, Error, Scope.Scope> =>
  Effect.gen(function*() {
    if (redisMode === "external") return external(process.env.REDIS_URL!)
    const parent = yield* Effect.scope
    const runtime = yield* Effect.runtime<CommandExecutor.CommandExecutor>()
    const args = options.args ?? []
    const incarnation = (port: number) =>
      Effect.gen(function*() {
        const scope = yield* Scope.fork(parent, ExecutionStrategy.sequential)
        const proc = yield* redisProcess({ port, args, env: options.env }).pipe(
          Scope.extend(scope),
          Effect.onError((cause) => Scope.close(scope, Exit.failCause(cause)))
        )
        return { scope, proc }
      })
    // Another process can take the port between probing and binding: try a few.
    let current = yield* Effect.promise(freePort).pipe(
      Effect.flatMap(incarnation),
      Effect.retry({ times: 4 })
    )
    const port = current.proc.port
    const run = Runtime.runPromise(runtime)
    const server: RedisServer = {
      host,
      port,
      url: `redis://${host}:${port}`,
      controlled: true,
      stop: () => run(Scope.close(current.scope, Exit.void)),
      kill: (name) => signal(current.proc.pid, name),
      pause: () => signal(current.proc.pid, "SIGSTOP"),
      resume: () => signal(current.proc.pid, "SIGCONT"),
      restart: () =>
        run(Effect.gen(function*() {
          yield* Scope.close(current.scope, Exit.void)
          current = yield* incarnation(port)
        }))
    }
    return server
  }).pipe(Effect.provide(NodeContext.layer))

/**
 * Start a `redis-server` on a free loopback port and wait until it answers PING. Under
 * `redisMode === "external"` returns the `REDIS_URL` server, which cannot be controlled.
 * `stop()` closes the process's scope (and `restart()` opens a new one).
 */
export const startRedisServer = async (options: RedisServerOptions = {}): Promise<RedisServer> => {
  const scope = Effect.runSync(Scope.make())
  const exit = await Effect.runPromiseExit(Scope.extend(launch(options), scope))
  if (Exit.isSuccess(exit)) return exit.value
  await Effect.runPromise(Scope.close(scope, exit))
  throw Cause.squash(exit.cause)
}

/** A server as a scoped resource: it stops when the scope closes. */
export const redisServer = (options: RedisServerOptions = {}): Effect.Effect<RedisServer, Error, Scope.Scope> =>
  launch(options)
