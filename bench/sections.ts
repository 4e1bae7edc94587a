/** The report's sections for the promise-land, memory-backend, scale, read-heavy and fair hand-off scenarios. */
import { dec, failedRows, int, ok, table } from "./format.js"
import type { BenchResults } from "./results.js"
import { isFailed } from "./results.js"

export const promiseSection = (results: BenchResults): string => {
  const outcomes = results.promise ?? []
  if (outcomes.length === 0) return ""
  const rows = ok(outcomes).map((r) => [
    r.library,
    int(r.opsPerSecond),
    `${dec(r.latency.p50, 1)} µs`,
    `${dec(r.latency.p99, 1)} µs`,
    `${dec(r.cpuMicrosPerOp, 0)} µs`,
    int(r.latency.count)
  ])
  return `### g. Promise-land: an \`async\` caller, one uncontended lock per request

${table(["Caller", "Ops/s", "p50", "p99", "CPU per op", "Samples"], [...rows, ...failedRows(outcomes, 6)])}

A plain \`async\` loop (no Effect around it), as an Express handler would call a lock: effect-lock
through \`ManagedRuntime.runPromise(withLock(key, Effect.void))\` per operation and through its promise
client (\`LockClient.make(layer).using(key, async () => ...)\`), redis-semaphore's \`Mutex\`
\`acquire()\`/\`release()\`, redlock's \`using\`, and the floor: the same two \`EVALSHA\`s awaited on a
bare ioredis client. Rounds of 0.8 s after 0.3 s of warm-up, taking turns. *CPU per op* is this
process's user + system time over the measured windows divided by the operations.
`
}

export const memorySection = (results: BenchResults): string => {
  const memory = results.memory
  if (memory === undefined) return ""
  if (isFailed(memory)) return `### h. Memory backend\n\nFailed: ${memory.error}\n`
  return `### h. Memory backend: the library's own cost, no round trip

${
    table(["Operation", "CPU per operation"], [
      ["Uncontended `withLock(key, Effect.void)`", `${dec(memory.uncontendedCpuMicros, 2)} µs`],
      ["Nested, reentrant `withLock` inside a held lock", `${dec(memory.reentrantCpuMicros, 2)} µs`],
      [
        "Starting one fiber as `withLock` starts its program's (`Runtime.runFork`, at once, empty)",
        `${dec(memory.guardFiberCpuMicros, 2)} µs`
      ],
      ["The bare loop step subtracted from both", `${dec(memory.baselineCpuMicros, 3)} µs`]
    ])
  }

${int(memory.iterations)} iterations of each in one fiber after a tenth as many of warm-up, timed
as this process's CPU time (user + system), minus the same loop with a bare \`Effect.void\`.
`
}

/**
 * Where effect-lock's time goes on one uncontended Redis lock: the same two scripts on a bare
 * client, through the backend's primitives, as a whole `withLock`, and from promise-land; with the
 * memory backend's cost of the rest (no round trip) and the guard fiber's share of it.
 */
export const ladderSection = (results: BenchResults): string => {
  const raw = results.raw !== undefined && !isFailed(results.raw) ? results.raw : undefined
  const bare = raw?.floors.find((f) => f.client === "default")?.serial
  const primitives = raw?.floors.find((f) => f.client === "primitives")?.serial
  const withLock = ok(results.serial).find((r) => r.library === "effect-lock")
  const promise = ok(results.promise ?? []).find((r) => r.library === "effect-lock (runPromise)")
  const memory = results.memory !== undefined && !isFailed(results.memory) ? results.memory : undefined
  if (bare === undefined || primitives === undefined || withLock === undefined) return ""
  const row = (
    what: string,
    r: {
      readonly latency: { readonly p50: number }
      readonly cpuMicrosPerOp: number
      readonly serverMicrosPerOp?: number | undefined
    }
  ) => [
    what,
    `${dec(r.latency.p50, 1)} µs`,
    `${dec(r.cpuMicrosPerOp, 0)} µs`,
    `${r.cpuMicrosPerOp >= bare.cpuMicrosPerOp ? "+" : "−"}${
      dec(Math.abs(r.cpuMicrosPerOp - bare.cpuMicrosPerOp), 0)
    } µs`,
    r.serverMicrosPerOp === undefined ? "" : `${dec(r.serverMicrosPerOp, 1)} µs`
  ]
  const rows = [
    row("The two scripts on a bare ioredis client (the floor)", bare),
    row("The same, through `RedisBackend`'s `tryAcquire` and `release` (Effects, its connection)", primitives),
    row("A whole `withLock(key, Effect.void)`", withLock),
    ...(promise === undefined ? [] : [row("`ManagedRuntime.runPromise(withLock(...))` per operation", promise)])
  ]
  const memoryText = memory === undefined ? "" : `

With no round trip at all (section h), a whole \`withLock\` costs ${
    dec(memory.uncontendedCpuMicros, 1)
  } µs of CPU on the memory backend, and
starting the fiber that runs the program guarded, which the shape requires (a lost lease interrupts
that fiber, never the caller's), ${dec(memory.guardFiberCpuMicros, 1)} µs of it.`
  return `### Where effect-lock's time goes: one uncontended lock on Redis

${table(["Step", "p50", "CPU per op", "CPU over the floor", "Redis CPU per op"], rows)}

The rows come from the serial rounds above (the floors from the raw rounds, which take turns with
them). The primitives row is the two calls alone; the \`withLock\` row adds the lock around them:
checking the key and options, the hold, its entry in the renewal scheduler, the fiber that runs the
program, and the release's bookkeeping.${memoryText}
`
}

export const scaleSection = (results: BenchResults): string => {
  const scale = results.atScale
  if (scale === undefined) return ""
  if (isFailed(scale)) return `### i. Scale\n\nFailed: ${scale.error}\n`
  return `### i. Scale in one process: ${int(scale.holds)} holds, ${int(scale.waiters)} waiters

${
    table(["Measure", "Value"], [
      [`${int(scale.holds)} \`Lock.acquire\`s into one scope (256 at a time)`, `${dec(scale.acquireSeconds, 1)} s`],
      ["Heap per hold (after a full GC)", `${int(scale.heapPerHoldBytes)} B`],
      [
        `Redis commands written per renew period (one renewal of every hold, over ${
          dec(scale.periodsObserved, 1)
        } periods; ${dec(scale.commandsPerPeriodOfClock, 1)} per ${int(scale.renewPeriodMillis)} ms of the clock)`,
        dec(scale.commandsPerRenewPeriod, 1)
      ],
      ["Event-loop delay p99 while renewing", `${dec(scale.eventLoopDelayP99Millis, 1)} ms`],
      ["Holds lost", int(scale.lostHolds)],
      [`Connections while ${int(scale.waiters)} fibers wait on ${scale.keys} keys`, int(scale.connectionsWaiting)],
      [
        "Heap per waiter (after a full GC; a bare fiber forked the same way, parked on a Deferred)",
        `${int(scale.heapPerWaiterBytes)} B (${
          scale.heapPerBareFiberBytes === undefined ? "?" : int(scale.heapPerBareFiberBytes)
        } B)`
      ],
      [
        "Commands written per acquisition (holders and waiters, releases included)",
        dec(scale.commandsPerAcquisition, 2)
      ],
      ["Waiters served / drain time", `${int(scale.acquired)} / ${dec(scale.drainSeconds, 1)} s`],
      [
        "Failures (the first one)",
        `${int(scale.failures)}${scale.firstFailure === undefined ? "" : ` (${scale.firstFailure})`}`
      ]
    ], "--- | ---:")
  }

The holds use a 6 s lease, so the watchdog renews each one every 2 s; the bench keeps them for
three renew periods, counts the commands the process writes meanwhile (renewals are batched, many
leases per call) per renewal of every hold (a renewal comes due on a grid, up to 128 ms early, so
6 s of the clock hold a little more than three), samples the event loop's delay (\`perf_hooks.monitorEventLoopDelay\`, 5 ms
resolution) and finally asks every lease whether it is still held. Then 100 fibers each hold one of
100 keys while 100 more per key wait; after a second the holders let go and every waiter takes its
key once. Commands are counted where ioredis writes them.
`
}

export const readHeavySection = (results: BenchResults): string => {
  const outcomes = results.readHeavy ?? []
  if (outcomes.length === 0) return ""
  const rows = ok(outcomes).map((r) => [
    r.lock,
    int(r.readsPerSecond),
    int(r.writesPerSecond),
    `${dec(r.readWait.p50, 1)} / ${dec(r.readWait.p99, 1)} ms`,
    `${dec(r.writeWait.p50, 1)} / ${dec(r.writeWait.p99, 1)} ms`,
    int(r.maxReadersInside),
    int(r.violations),
    r.failures.length === 0 ? "" : r.failures.join("; ")
  ])
  return `### j. Read-heavy: 16 readers and 1 writer on one key

${
    table(
      [
        "Lock",
        "Reads/s",
        "Writes/s",
        "Read wait p50 / p99",
        "Write wait p50 / p99",
        "Most readers inside",
        "Violations",
        "Errors"
      ],
      [...rows, ...failedRows(outcomes, 8)]
    )
  }

effect-lock alone, on its Redis backend: 16 readers (~1 ms inside, ~1 ms outside) and one writer
(~1 ms inside, ~10 ms outside) on one key, for 3 s after 0.5 s of warm-up, once with
\`ReadWriteLock\` (\`withReadLock\`/\`withWriteLock\`: readers share, the writer goes first) and once
with the mutex (\`withLock\` for everybody). *Violations* counts a writer entering with anybody
inside or a reader entering with a writer inside.
`
}

export const fairHandoffSection = (results: BenchResults): string => {
  const outcomes = results.fairHandoff ?? []
  if (outcomes.length === 0) return ""
  const rows = ok(outcomes).map((r) => [
    r.lock,
    int(r.acquisitionsPerSecond),
    `${dec(r.wait.p50, 1)} ms`,
    `${dec(r.wait.p99, 1)} ms`,
    `${int(r.gap.p50)} µs`,
    dec(r.fairness, 2),
    `${dec(r.regrabs * 100, 0)} %`,
    int(r.overlaps),
    r.failures.length === 0 ? "" : r.failures.join("; ")
  ])
  return `### k. Fair-lock hand-off: 16 workers, one key

${
    table(
      [
        "Lock",
        "Acquisitions/s",
        "Wait p50",
        "Wait p99",
        "Hand-off gap p50",
        "Fairness",
        "Re-grabs",
        "Overlaps",
        "Errors"
      ],
      [...rows, ...failedRows(outcomes, 9)]
    )
  }

The hand-off scenario (c) run by effect-lock alone, once with \`FairLock.withLock\` (first come,
first served across processes: a queue and a deadline set in Redis, a channel per waiting owner)
and once with the mutex (\`withLock\`), one after the other.
`
}

export const redlockSection = (results: BenchResults): string => {
  const outcomes = results.redlock ?? []
  if (outcomes.length === 0) return ""
  const rows = ok(outcomes).map((r) => [
    r.library,
    String(r.nodes),
    `${dec(r.serial.latency.p50, 1)} µs`,
    `${dec(r.serial.latency.p99, 1)} µs`,
    `${dec(r.serial.cpuMicrosPerOp, 0)} µs`,
    int(r.distinct.opsPerSecond),
    int(r.distinct.failures)
  ])
  return `### o. Redlock: one lock over 3 and 5 independent servers

${
    table(
      ["Library", "Nodes", "Serial p50", "Serial p99", "CPU per op", "64 fibers, distinct keys: ops/s", "Failures"],
      [...rows, ...failedRows(outcomes, 7)]
    )
  }

Three Redlock implementations on the same throw-away \`redis-server\`s (3, then 5, started for this
scenario on loopback, persistence off): effect-lock's \`withLock\` on
\`RedlockBackend.layer({ nodes })\` (each call goes to every node at once, decided once a quorum
answered, fencing tokens from the nodes' counters), redlock's \`using([key], 30000, routine)\`
(\`retryCount: -1\`), and redis-semaphore's \`RedlockMutex\` \`acquire()\`/\`release()\`. The serial loop
of a (3 rounds of 0.8 s) and the 64 distinct-key fibers of b (3 rounds of 0.9 s), taking turns.
*CPU per op* is this process's time: the servers' is not counted. Every server shares the machine's
cores with the client, so on 2 cores the 5-node figures are mostly the servers' CPU.
`
}
