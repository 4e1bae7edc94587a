/**
 * The `effect-lock` command line: `inspect`, `list`, `watch` and `unlock`, on @effect/cli. Every
 * failure is one line on stderr and an exit code from `errors.ts`; the Redis URL travels as
 * `Redacted` and is never printed.
 */
import { Args, Command, HelpDoc, Options, Prompt, ValidationError } from "@effect/cli"
import * as NodeContext from "@effect/platform-node/NodeContext"
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import { Cause, Config, Console, Effect, Exit, Option, Redacted } from "effect"
import { readFileSync } from "node:fs"
import { connect, describe, forceUnlock, list, type Target } from "./client.js"
import { CliError, ExitCode } from "./errors.js"
import { block, columns, json, row, table } from "./format.js"
import { watch } from "./watch.js"

// package.json sits three folders up from both src/internal/cli and dist/internal/cli.
const version = (JSON.parse(readFileSync(new URL("../../../package.json", import.meta.url), "utf8")) as {
  readonly version: string
}).version
const defaultUrl = "redis://127.0.0.1:6379"

const url = Options.redacted("url").pipe(
  Options.withPseudoName("URL"),
  Options.withDescription(
    `The Redis server (or any node of a Redis Cluster, which is detected), as redis://[[user]:password@]host[:port][/db] or rediss://... for TLS. Falls back to the REDIS_URL environment variable, then to ${defaultUrl}. Only host and port are ever printed.`
  ),
  Options.withFallbackConfig(Config.redacted("REDIS_URL")),
  Options.withDefault(Redacted.make(defaultUrl))
)

const prefix = Options.text("prefix").pipe(
  Options.withPseudoName("PREFIX"),
  Options.withDescription(
    "The prefix the services give RedisBackend (e.g. \"locks:\"): names are given and shown without it."
  ),
  Options.withDefault("")
)

const jsonOption = Options.boolean("json").pipe(
  Options.withDescription("Print JSON for scripts: one object per lock, one per line (see docs/cli.md).")
)

const target = (options: { readonly url: Redacted.Redacted<string>; readonly prefix: string }): Target => ({
  url: options.url,
  prefix: options.prefix
})

const key = Args.text({ name: "key" }).pipe(
  Args.withDescription("The lock's name, as the program passes it to withLock.")
)

const pattern = Args.text({ name: "pattern" }).pipe(
  Args.withDescription("A Redis glob over lock names (without the prefix); * by default."),
  Args.withDefault("*")
)

const inspect = Command.make(
  "inspect",
  { key, url, prefix, json: jsonOption },
  (options) =>
    Effect.scoped(Effect.gen(function*() {
      const connection = yield* connect(target(options))
      const described = yield* describe(connection, options.key)
      if (described._tag === "NotALock") {
        return yield* new CliError({
          message: `${options.key} holds a ${described.type}, not a lock`,
          exitCode: ExitCode.notALock
        })
      }
      yield* Console.log(options.json ? json(described.description) : block(described.description))
    }))
).pipe(
  Command.withDescription(
    "Show one lock: who holds it (owner id and hold count), how long its lease has left, its latest fencing token, its kind (lock, fair-lock, read-write-lock) and how many connections wait for its release. A free lock shows no holder and exits 0."
  )
)

const listCommand = Command.make(
  "list",
  { pattern, url, prefix, json: jsonOption },
  (options) =>
    Effect.scoped(Effect.gen(function*() {
      const connection = yield* connect(target(options))
      const locks = yield* list(connection, options.pattern)
      if (options.json) {
        for (const lock of locks) yield* Console.log(json(lock))
      } else {
        yield* Console.log(locks.length === 0 ? "no locks" : table(columns, locks.map(row)))
      }
    }))
).pipe(
  Command.withDescription(
    "List the locks whose names match the pattern, with the columns of inspect: SCAN for hashes shaped like a lock (owner fields with hold counts, as effect-lock and Redisson write them); other keys are never touched."
  )
)

const interval = Options.integer("interval").pipe(
  Options.withPseudoName("MILLIS"),
  Options.withDescription(
    "Milliseconds between full refreshes (TTL countdown, and changes when keyspace events are off)."
  ),
  Options.withDefault(1000)
)

const watchCommand = Command.make(
  "watch",
  { pattern, url, prefix, json: jsonOption, interval },
  (options) =>
    Effect.scoped(
      watch(target(options), options.pattern, { json: options.json, intervalMillis: Math.max(100, options.interval) })
    )
).pipe(
  Command.withDescription(
    "A live table of the locks matching the pattern and a log of acquisitions, hand-overs, releases and expiries, from release notifications and keyspace events (notify-keyspace-events with K and A, or Khgx; without them, changes show at the next refresh). On a Redis Cluster it follows the sharded release channels of the locks it shows and every master's keyspace events. With --json, or when stdout is not a terminal, one line per change instead. Ctrl-C leaves."
  )
)

const force = Options.boolean("force").pipe(
  Options.withDescription("Required: unlock deletes the lock whoever holds it.")
)
const yes = Options.boolean("yes").pipe(
  Options.withAlias("y"),
  Options.withDescription("Do not ask for confirmation (needed when stdin is not a terminal).")
)

const unlock = Command.make(
  "unlock",
  { key, force, yes, url, prefix, json: jsonOption },
  (options) =>
    Effect.scoped(Effect.gen(function*() {
      if (!options.force) {
        return yield* new CliError({
          message: `unlock deletes ${options.key} whoever holds it: pass --force to mean it`,
          exitCode: ExitCode.usage
        })
      }
      const connection = yield* connect(target(options))
      const before = yield* describe(connection, options.key)
      if (before._tag === "NotALock") {
        return yield* new CliError({
          message: `${options.key} holds a ${before.type}, not a lock: left alone`,
          exitCode: ExitCode.notALock
        })
      }
      const holders = before.description.holders
      if (!options.yes) {
        if (!process.stdin.isTTY) {
          return yield* new CliError({
            message: `not unlocking ${options.key}: confirmation needed and stdin is not a terminal (pass --yes)`,
            exitCode: ExitCode.notConfirmed
          })
        }
        const who = holders.length === 0 ? "no one" : holders.map((holder) => holder.owner).join(", ")
        const confirmed = yield* Prompt.confirm({
          message: `Delete lock ${options.key} held by ${who}? Its holder is not told and keeps running.`,
          initial: false
        }).pipe(Effect.orElseSucceed(() => false))
        if (!confirmed) {
          return yield* new CliError({
            message: `not unlocking ${options.key}: not confirmed`,
            exitCode: ExitCode.notConfirmed
          })
        }
      }
      const result = yield* forceUnlock(connection, options.key)
      switch (result._tag) {
        case "NotALock":
          return yield* new CliError({
            message: `${options.key} holds a ${result.type}, not a lock: left alone`,
            exitCode: ExitCode.notALock
          })
        case "NotLocked":
          if (options.json) yield* Console.log(JSON.stringify({ key: options.key, unlocked: false, woke: 0 }))
          return yield* new CliError({
            message: `${options.key} is not locked: nothing deleted`,
            exitCode: ExitCode.notLocked
          })
        case "Unlocked":
          yield* Console.log(
            options.json
              ? JSON.stringify({ key: options.key, unlocked: true, woke: result.receivers, holders })
              : `unlocked ${options.key} (was held by ${
                holders.map((holder) => holder.owner).join(", ") || "no one"
              }); release published to ${result.receivers} subscribed connection(s)`
          )
      }
    }))
).pipe(
  Command.withDescription(
    "Delete a lock whoever holds it and publish its release so that waiters try at once (Redisson's forceUnlock). Asks for confirmation unless --yes. The holder is not told: its next renewal finds the lock gone and its program is interrupted (LockLostError \"deleted\")."
  )
)

const root = Command.make("effect-lock").pipe(
  Command.withDescription(
    "Look at and operate the locks that effect-lock (and Redisson) keep in Redis: who holds a lock, since when and with which fencing token, who waits, and a forced unlock for the lock whose holder is gone."
  ),
  Command.withSubcommands([inspect, listCommand, watchCommand, unlock])
)

const footer = HelpDoc.blocks([
  HelpDoc.h1("EXIT STATUS"),
  HelpDoc.p("0  done (inspect of a free lock included)"),
  HelpDoc.p("1  an unexpected error (a Redis error reply)"),
  HelpDoc.p("2  usage: an unknown option, a missing argument, unlock without --force"),
  HelpDoc.p("3  unlock: the lock was not held, nothing deleted"),
  HelpDoc.p("4  unlock: not confirmed (declined, or no terminal and no --yes)"),
  HelpDoc.p("5  Redis unreachable, or the credentials refused"),
  HelpDoc.p("6  the name holds data of another type, not a lock: left alone"),
  HelpDoc.h1("ENVIRONMENT"),
  HelpDoc.p("REDIS_URL  the Redis server when --url is not given."),
  HelpDoc.h1("EXAMPLES"),
  HelpDoc.p("effect-lock inspect orders:42 --prefix locks:"),
  HelpDoc.p("effect-lock list 'orders:*' --json | jq .key"),
  HelpDoc.p("effect-lock watch --url redis://127.0.0.1:6379"),
  HelpDoc.p("effect-lock unlock orders:42 --force --yes"),
  HelpDoc.h1("SEE ALSO"),
  HelpDoc.p("docs/cli.md in the effect-lock package")
])

const cli = Command.run(root, {
  name: "effect-lock",
  version,
  executable: "effect-lock",
  summary: HelpDoc.getSpan(HelpDoc.p("inspect, list, watch and force-unlock distributed locks in Redis")),
  footer
})

/** The exit code an ended run stands for. */
const exitCodeOf = (exit: Exit.Exit<unknown, unknown>): number => {
  if (Exit.isSuccess(exit)) return ExitCode.ok
  if (Cause.isInterruptedOnly(exit.cause)) return ExitCode.ok
  const failure = Cause.failureOption(exit.cause)
  if (Option.isSome(failure)) {
    const error = failure.value
    if (error instanceof CliError) return error.exitCode
    if (ValidationError.isValidationError(error)) return ExitCode.usage
  }
  return ExitCode.failure
}

/** Run the CLI on `argv` (as `process.argv`) and exit with the code of its outcome. */
export const main = (argv: ReadonlyArray<string>): void => {
  const program = cli(argv).pipe(
    Effect.tapError((error) =>
      error instanceof CliError ? Console.error(`effect-lock: ${error.message}`) : Effect.void
    ),
    Effect.tapDefect((defect) => Console.error(`effect-lock: unexpected failure: ${String(defect).split("\n")[0]}`)),
    Effect.provide(NodeContext.layer)
  )
  NodeRuntime.runMain(program, {
    disableErrorReporting: true,
    disablePrettyLogger: true,
    teardown: (exit, onExit) => onExit(exitCodeOf(exit))
  })
}
