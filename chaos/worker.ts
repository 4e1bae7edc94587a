/**
 * A chaos worker: one OS process that takes the lock again and again and, holding it, does a fenced
 * read-modify-write of each resource (`resources.ts`), printing one JSON history record per step on
 * stdout (`history.ts`). Started by the runner as
 *
 *   node --import tsx chaos/worker.ts '<WorkerConfig as JSON>'
 *
 * An operation whose resource steps are `guarded` runs each step through the grant's guard (the
 * step starts only while the lease is held); the others rely on `withLock` alone (the program is
 * interrupted when the loss is noticed) and on the resources' fencing.
 */
import { Cause, Effect, Exit, Logger, LogLevel, Option, Schedule } from "effect"
import { Redis } from "ioredis"
import pg from "pg"
import type { WorkerConfig } from "./config.js"
import { namesOf } from "./config.js"
import type { HistoryRecord, Outcome, ResourceName, WriteOutcome } from "./history.js"
import { backends, type Grant, kinds } from "./kinds.js"
import type { Resource, Value } from "./resources.js"
import { postgres, redis } from "./resources.js"
import { random } from "./schedule.js"

const config = JSON.parse(process.argv[2] ?? "{}") as WorkerConfig
const names = namesOf(config.run)

const mono = (): number => Number(process.hrtime.bigint()) / 1e6

type Without<T> = T extends unknown ? Omit<T, "mono" | "w" | "id"> : never

// stdout is a pipe: writes are synchronous on Linux, so a record printed before a step is in the
// pipe even if the process is killed during the step.
const print = (record: HistoryRecord) => process.stdout.write(JSON.stringify(record) + "\n")
const emit = (id: string, record: Without<Extract<HistoryRecord, { readonly id: string }>>, at = mono()) =>
  print({ ...record, mono: at, w: config.w, id } as HistoryRecord)

const defect = (message: string) => print({ t: "defect", w: config.w, message, mono: mono() })
process.on("unhandledRejection", (error) => {
  defect(`unhandled rejection: ${String(error)}`)
  process.exit(70)
})
process.on("uncaughtException", (error) => {
  defect(`uncaught exception: ${String(error)}`)
  process.exit(70)
})

const kind = kinds[config.kind]
const backend = backends[config.backend]
if (kind === undefined || backend === undefined) {
  console.error(`unknown kind ${config.kind} or backend ${config.backend}`)
  process.exit(2)
}

const rng = random(config.seed * 7919 + config.w * 104729 + config.life)
const fenced = config.broken !== "fencing"

/** The resource connections, made again when one breaks. */
const redisClient = new Redis(config.resourceUrl, {
  connectionName: `chaos-resource-${config.w}`,
  enableOfflineQueue: false,
  maxRetriesPerRequest: 0,
  commandTimeout: 1000,
  retryStrategy: () => 100
}).on("error", () => {})

let pgClient: pg.Client | undefined
const pgResource = (): Effect.Effect<Resource | undefined> =>
  Effect.suspend(() => {
    if (config.pgUrl === null) return Effect.succeed(undefined)
    if (pgClient !== undefined) return Effect.succeed(postgres(pgClient, names.pgTable, names.pgRow, fenced))
    const client = new pg.Client({ connectionString: config.pgUrl, query_timeout: 3000 })
    client.on("error", () => {
      if (pgClient === client) pgClient = undefined
    })
    return Effect.tryPromise(() => client.connect()).pipe(
      Effect.map(() => {
        pgClient = client
        return postgres(client, names.pgTable, names.pgRow, fenced)
      }),
      Effect.retry(Schedule.spaced("200 millis"))
    )
  }).pipe(Effect.orDie)

const redisResource = redis(redisClient, names, fenced)

const errorTag = (cause: Cause.Cause<unknown>): { readonly tag: string; readonly reason?: string } => {
  const failure = Cause.failureOption(cause)
  if (Option.isNone(failure)) return { tag: Cause.isInterruptedOnly(cause) ? "Interrupted" : "Defect" }
  const error = failure.value as { readonly _tag?: string; readonly reason?: string; readonly res?: string }
  return { tag: error._tag ?? "Unknown", ...(error.reason === undefined ? {} : { reason: error.reason }) }
}

const writeOutcome = (exit: Exit.Exit<unknown, unknown>, ran: boolean): WriteOutcome => {
  if (Exit.isSuccess(exit)) return "ok"
  if (!ran) return "skipped"
  return errorTag(exit.cause).tag === "Refused" ? "refused" : "unknown"
}

const body = (id: string, grant: Grant, guarded: boolean, resources: ReadonlyArray<Resource>) =>
  Effect.gen(function*() {
    const token = grant.fencingToken
    emit(id, { t: "acquired", token: String(token) })
    const step = <A, E>(effect: Effect.Effect<A, E>) => guarded ? grant.guard(effect) : effect
    const read: Partial<Record<ResourceName, Value>> = {}
    for (const resource of resources) {
      const entered = mono()
      const value = yield* step(resource.claim(token, id))
      read[resource.name] = value
      emit(id, { t: "read", res: resource.name, token: String(token), n: value.n, writer: value.writer, entered })
    }
    yield* Effect.sleep(rng.int(0, config.workMs))
    for (const resource of resources) {
      const n = (read[resource.name]?.n ?? 0) + 1
      emit(id, { t: "write", res: resource.name, token: String(token), n })
      let ran = false
      yield* step(Effect.suspend(() => {
        ran = true
        return resource.write(token, { n, writer: id })
      })).pipe(
        Effect.onExit((exit) =>
          Effect.sync(() => {
            const outcome = writeOutcome(exit, ran)
            const detail = Exit.isFailure(exit) ? errorTag(exit.cause).tag : undefined
            emit(id, { t: "wrote", res: resource.name, outcome, ...(detail === undefined ? {} : { detail }) })
          })
        )
      )
    }
  })

const outcomeOf = (exit: Exit.Exit<unknown, unknown>): { readonly outcome: Outcome; readonly reason?: string } => {
  if (Exit.isSuccess(exit)) return { outcome: "ok" }
  const { reason, tag } = errorTag(exit.cause)
  switch (tag) {
    case "LockLostError":
      return { outcome: "lost", ...(reason === undefined ? {} : { reason }) }
    case "LockTimeoutError":
      return { outcome: "timeout" }
    case "LockBackendError":
    case "LockOptionsError":
      return { outcome: "backend-error" }
    case "Refused":
      return { outcome: "refused" }
    case "ResourceFailed":
      return { outcome: "resource-error" }
    default:
      defect(`operation ended with ${tag}: ${Cause.pretty(exit.cause)}`)
      return { outcome: "defect" }
  }
}

let op = 0
const loop = Effect.gen(function*() {
  while (true) {
    const id = `w${config.w}.${config.life}.${op++}`
    const guarded = rng.next() < config.guardedShare
    const pgRes = yield* pgResource()
    const resources = pgRes === undefined ? [redisResource] : [pgRes, redisResource]
    print({ t: "invoke", w: config.w, id, guarded, wall: Date.now(), mono: mono() })
    const exit = yield* Effect.exit(
      kind.withLock(
        names.lock,
        { lease: config.leaseMs, wait: config.waitMs },
        (grant) => body(id, grant, guarded, resources)
      )
    )
    print({ t: "end", w: config.w, id, wall: Date.now(), mono: mono(), ...outcomeOf(exit) })
    if (config.broken === "release") {
      // A release that does not check the owner: whoever holds the lock now loses it.
      yield* Effect.ignore(Effect.tryPromise(() => redisClient.del(names.lock)))
    }
    // Let the others in now and then, as an application between jobs would.
    yield* Effect.sleep(rng.int(0, 10))
  }
})

const main = loop.pipe(
  Effect.provide(backend.layer(config.redisUrls)),
  // The backend cannot be built while Redis is down (a worker restarted during a fault): try again.
  Effect.retry(Schedule.spaced("200 millis")),
  Effect.catchAllDefect((error) => Effect.sync(() => defect(`worker died: ${String(error)}`))),
  Logger.withMinimumLogLevel(LogLevel.Error)
)

Effect.runFork(main).addObserver((exit) => {
  if (Exit.isFailure(exit)) defect(`worker ended: ${Cause.pretty(exit.cause)}`)
  process.exit(1)
})
