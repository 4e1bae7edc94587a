/**
 * A lock-holding OS process for the fault suite, driven by JSON lines on stdin:
 *
 *   node --import tsx test/faults/worker.ts <redis url> [<redlock node url>,<redlock node url>,...]
 *
 * The lock lives on the Redis at `<redis url>`, or, given a list of nodes, on a `RedlockBackend`
 * over them; the fenced resource (`data`) is always at `<redis url>`.
 *
 * It prints `{"ev":"ready"}` once its backend is connected, then one JSON line per event. Commands:
 *
 * - `{"op":"acquire","key":k,"lease":ms,"retry"?:ms}`: `Lock.acquire` into a scope that stays open
 *   until "release" (a `retry` of N ms means `Schedule.spaced(N)`, so only release notifications
 *   and the holder's lease wake the waiter). Replies `acquired` with the token and `at`, the
 *   host-wide monotonic time (`process.hrtime`, CLOCK_MONOTONIC on Linux, shared by every process)
 *   at which the acquisition returned. A background fiber then waits on `lease.lost` and reports
 *   `lost` with the reason.
 * - `{"op":"step"}`: one step of the holder's work, run through `lease.guard`. Replies `step` with
 *   the number of steps that have run, or `refused` with the error that stopped it.
 * - `{"op":"write","value":v}`: a raw `Fencing.redisSet` of key `data` with the lease's token,
 *   deliberately *outside* the guard: what a holder that does not know it lost the lock would do.
 *   Replies `written` or `rejected` (with the highest token the resource has accepted).
 * - `{"op":"loop","every":ms}`: start the holder's work in the background, a loop of steps each run
 *   through `lease.guard`, `every` ms apart. For each step it records when the step was *entered*
 *   (just before `lease.guard` was called) and when its body ran; the first refused step ends the
 *   loop and is reported as `loop-refused` (with when it was entered).
 * - `{"op":"report"}`: replies `report` with the loop's steps (`[entered, ran]` hrtime pairs).
 * - `{"op":"release"}`: close the scope. Replies `released` (the release itself may still be on
 *   its way to the server).
 * - `{"op":"inspect","key":k}`: `Lock.inspect` through this process's backend connection, so after
 *   anything this process sent before. Replies `inspected` with the holders' owner ids.
 *
 * Commands run one at a time, in order, so a command written while the process is stopped
 * (SIGSTOP) is the first thing it does when it continues.
 */
import { Cause, Effect, Exit, Option, Queue, Schedule, Scope } from "effect"
import { Redis } from "ioredis"
import type { Lease } from "../../src/index.js"
import { Fencing, Lock } from "../../src/index.js"
import * as RedisBackend from "../../src/RedisBackend.js"
import * as RedlockBackend from "../../src/RedlockBackend.js"
import type { WorkerCommand } from "./support.js"

const [url, redlockNodes] = process.argv.slice(2)
if (url === undefined) {
  console.error("usage: worker.ts <redis url>")
  process.exit(2)
}

type Command = WorkerCommand

// The fault suite promises no unhandled rejection or uncaught exception anywhere, workers included:
// report one as an event (the test fails on it) and exit.
const reportUnhandled = (error: unknown) => {
  process.stdout.write(
    JSON.stringify({ ev: "unhandled", message: String(error), at: String(process.hrtime.bigint()) }) + "\n"
  )
  process.exit(70)
}
process.on("unhandledRejection", reportUnhandled)
process.on("uncaughtException", reportUnhandled)

const emit = (event: Record<string, unknown>) =>
  Effect.sync(() => {
    process.stdout.write(JSON.stringify({ ...event, at: String(process.hrtime.bigint()) }) + "\n")
  })

const describeFailure = (cause: Cause.Cause<unknown>) => {
  const failure = Cause.failureOption(cause)
  if (Option.isSome(failure)) {
    const error = failure.value as { readonly _tag?: string; readonly reason?: string; readonly highest?: bigint }
    return { tag: error._tag, reason: error.reason, highest: error.highest?.toString(), message: String(error) }
  }
  return { tag: "Defect", message: Cause.pretty(cause) }
}

const program = Effect.gen(function*() {
  const commands = yield* Queue.unbounded<Command>()
  let buffered = ""
  process.stdin.setEncoding("utf8")
  process.stdin.on("data", (chunk: string) => {
    buffered += chunk
    let newline: number
    while ((newline = buffered.indexOf("\n")) >= 0) {
      const line = buffered.slice(0, newline).trim()
      buffered = buffered.slice(newline + 1)
      if (line !== "") Queue.unsafeOffer(commands, JSON.parse(line) as Command)
    }
  })
  process.stdin.on("end", () => process.exit(0))

  // The resource the fencing token protects: a second, plain connection, as an application has.
  const resource = yield* Effect.acquireRelease(
    Effect.sync(() => new Redis(url, { maxRetriesPerRequest: 0 }).on("error", () => {})),
    (redis) => Effect.sync(() => redis.disconnect())
  )

  let held: { readonly lease: Lease; readonly scope: Scope.CloseableScope } | undefined
  let steps = 0
  const loopSteps: Array<readonly [string, string]> = []
  yield* emit({ ev: "ready", pid: process.pid })

  while (true) {
    const command = yield* Queue.take(commands)
    switch (command.op) {
      case "acquire": {
        const scope = yield* Scope.make()
        const options = {
          lease: command.lease,
          ...(command.retry === undefined ? {} : { retry: Schedule.spaced(command.retry) })
        }
        const exit = yield* Effect.exit(Scope.extend(Lock.acquire(command.key, options), scope))
        if (Exit.isFailure(exit)) {
          yield* Scope.close(scope, Exit.void)
          yield* emit({ ev: "error", op: "acquire", ...describeFailure(exit.cause) })
          break
        }
        const lease = exit.value
        held = { lease, scope }
        yield* emit({ ev: "acquired", token: String(lease.fencingToken), owner: lease.owner })
        yield* Effect.forkDaemon(
          Effect.catchAll(lease.lost, (error) => emit({ ev: "lost", reason: error.reason }))
        )
        break
      }
      case "step": {
        if (held === undefined) {
          yield* emit({ ev: "error", op: "step", message: "not holding a lease" })
          break
        }
        const exit = yield* Effect.exit(held.lease.guard(Effect.sync(() => ++steps)))
        yield* Exit.isSuccess(exit)
          ? emit({ ev: "step", ran: exit.value })
          : emit({ ev: "refused", ran: steps, ...describeFailure(exit.cause) })
        break
      }
      case "write": {
        if (held === undefined) {
          yield* emit({ ev: "error", op: "write", message: "not holding a lease" })
          break
        }
        const exit = yield* Effect.exit(
          Fencing.redisSet(resource, { key: "data", value: command.value, token: held.lease.fencingToken })
        )
        yield* Exit.isSuccess(exit)
          ? emit({ ev: "written", token: String(held.lease.fencingToken) })
          : emit({ ev: "rejected", token: String(held.lease.fencingToken), ...describeFailure(exit.cause) })
        break
      }
      case "loop": {
        const lease = held?.lease
        if (lease === undefined) {
          yield* emit({ ev: "error", op: "loop", message: "not holding a lease" })
          break
        }
        yield* Effect.forkDaemon(Effect.gen(function*() {
          while (true) {
            const entered = String(process.hrtime.bigint())
            const exit = yield* Effect.exit(lease.guard(Effect.sync(() => {
              loopSteps.push([entered, String(process.hrtime.bigint())])
            })))
            if (Exit.isFailure(exit)) {
              return yield* emit({ ev: "loop-refused", entered, ...describeFailure(exit.cause) })
            }
            yield* Effect.sleep(command.every)
          }
        }))
        yield* emit({ ev: "looping" })
        break
      }
      case "report": {
        yield* emit({ ev: "report", steps: loopSteps })
        break
      }
      case "inspect": {
        // Through this process's backend connection, so it reaches the server after every command
        // this process issued before (a release included).
        const info = yield* Effect.exit(Lock.inspect(command.key))
        yield* Exit.isSuccess(info)
          ? emit({ ev: "inspected", holders: Option.getOrUndefined(info.value)?.holders.map((h) => h.owner) ?? [] })
          : emit({ ev: "error", op: "inspect", ...describeFailure(info.cause) })
        break
      }
      case "release": {
        if (held !== undefined) yield* Scope.close(held.scope, Exit.void)
        held = undefined
        yield* emit({ ev: "released" })
        break
      }
    }
  }
}).pipe(
  Effect.scoped,
  Effect.provide(
    redlockNodes === undefined ? RedisBackend.layer({ url }) : RedlockBackend.layer({ nodes: redlockNodes.split(",") })
  )
)

const fiber = Effect.runFork(program)
fiber.addObserver((exit) => {
  console.error(Exit.isFailure(exit) ? Cause.pretty(exit.cause) : "worker ended")
  process.exit(1)
})
