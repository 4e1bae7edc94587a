/**
 * Turns a run into `docs/benchmarks.md`: the targets with their ratios, one table per scenario, the
 * machine, the command, and how to read it all.
 */
import { best, dec, failedRows, floorName, holdMillis, int, mib, ok, peers, ratio, subject, table } from "./format.js"
import type { BenchResults } from "./results.js"
import { isFailed } from "./results.js"
import { clusterSection } from "./scenarios/cluster.js"
import type { HandoffResult } from "./scenarios/handoff.js"
import { replicaSyncSection } from "./scenarios/replicaSync.js"
import { semaphoreSection } from "./scenarios/semaphore.js"
import type { SerialResult } from "./scenarios/serial.js"
import {
  fairHandoffSection,
  ladderSection,
  memorySection,
  promiseSection,
  readHeavySection,
  redlockSection,
  scaleSection
} from "./sections.js"
import { renderTargets, targetContext, targets } from "./targets.js"

// --- README headline ------------------------------------------------------------------------------

/** The few numbers the README quotes, between its `bench:headline` markers. */
export const renderHeadline = (results: BenchResults): string => {
  const lines: Array<string> = []
  const handoff = subject(results.handoff)
  const fastestPeer = best(peers(results.handoff), (p) => p.acquisitionsPerSecond)
  if (handoff !== undefined && fastestPeer !== undefined) {
    lines.push(
      `**Hand-off** (16 workers on one key): ${int(handoff.acquisitionsPerSecond)} acquisitions/s, wait p99 ` +
        `${dec(handoff.wait.p99, 0)} ms, fairness ${
          dec(handoff.fairness, 2)
        }; the fastest peer, ${fastestPeer.library}, ` +
        `${int(fastestPeer.acquisitionsPerSecond)}/s with wait p99 ${dec(fastestPeer.wait.p99, 0)} ms and fairness ` +
        `${dec(fastestPeer.fairness, 2)} (${
          dec(fastestPeer.regrabs * 100, 0)
        } % of its acquisitions went back to the worker that had just released).`
    )
  }
  const waiters = subject(results.waiters)
  if (waiters !== undefined) {
    const others = peers(results.waiters)
      .map((p) =>
        `${p.library} ${dec(p.commandsPerAcquisition, 1)}${
          p.connectionsWaiting > 2 ? ` (and ${int(p.connectionsWaiting)} connections)` : ""
        }`
      )
      .join(", ")
    lines.push(
      `**1,000 waiters**: ${waiters.connectionsWaiting} Redis connections and ${
        dec(waiters.commandsPerAcquisition, 1)
      } ` +
        `commands per acquisition, release included; ${others}.`
    )
  }
  const serial = subject(results.serial)
  const raw = results.raw !== undefined && !isFailed(results.raw) ? results.raw : undefined
  if (serial !== undefined && raw !== undefined) {
    const floor = raw.floors.find((f) => f.client === "default")
    const fastest = best(peers(results.serial), (p) => p.latency.p50, true)
    lines.push(
      `**Uncontended** acquire + release: p50 ${dec(serial.latency.p50, 0)} µs and ${
        dec(serial.cpuMicrosPerOp, 0)
      } µs of CPU` +
        (floor === undefined
          ? ""
          : `; a bare ioredis pair of the same two scripts: ${dec(floor.serial.latency.p50, 0)} µs, ${
            dec(floor.serial.cpuMicrosPerOp, 0)
          } µs of CPU`) +
        (fastest === undefined
          ? "."
          : `; the fastest peer, ${fastest.library}: ${dec(fastest.latency.p50, 0)} µs, ${
            dec(fastest.cpuMicrosPerOp, 0)
          } µs of CPU.`)
    )
  }
  const distinct = subject(results.distinct)
  const distinctPeer = best(peers(results.distinct), (p) => p.opsPerSecond)
  if (distinct !== undefined && distinctPeer !== undefined) {
    lines.push(
      `**64 fibers on distinct keys**: ${int(distinct.opsPerSecond)} ops/s, ` +
        `${ratio(distinct.opsPerSecond / distinctPeer.opsPerSecond)} ${distinctPeer.library}'s ${
          int(distinctPeer.opsPerSecond)
        }.`
    )
  }
  const reentrant = subject(results.reentrant)
  if (reentrant?.nanosPerNested !== undefined) {
    lines.push(
      `**Reentrant** nested \`withLock\`: ${dec(reentrant.nanosPerNested / 1000, 1)} µs, ` +
        `${
          reentrant.redisCommandsDuringLoop === 0 ? "no" : int(reentrant.redisCommandsDuringLoop ?? NaN)
        } Redis commands.`
    )
  }
  const rows = targets(results)
  lines.push(
    `Targets met: ${rows.filter((r) => r.met === true).length} of ${rows.length} ` +
      `(${results.date.slice(0, 10)}, effect-lock \`${results.revision}\`).`
  )
  return lines.map((line) => `- ${line}`).join("\n")
}

// --- scenarios --------------------------------------------------------------------------------------

const rawSection = (results: BenchResults) => {
  const raw = results.raw
  if (raw === undefined) return ""
  if (isFailed(raw)) return `### Raw limit\n\nFailed: ${raw.error}\n`
  const us = (ms: number) => `${dec(ms * 1000, 0)} µs`
  const rows = [
    [
      "`redis-benchmark`, 1 client, `EVALSHA acquire.lua`",
      int(raw.single.reduce((total, r) => total + r.requestsPerSecond, 0) / raw.single.length),
      `${us(raw.singleP50)} (rounds: ${raw.single.map((r) => us(r.p50)).join(", ")})`,
      us(Math.max(...raw.single.map((r) => r.p99)))
    ],
    [
      "`redis-benchmark`, 50 clients, `EVALSHA acquire.lua`",
      int(raw.fifty.requestsPerSecond),
      us(raw.fifty.p50),
      us(raw.fifty.p99)
    ],
    ...raw.floors.map((f) => [
      `${floorName[f.client]}, 1 loop, acquire + release pair`,
      `${int(f.serial.opsPerSecond)} pairs/s`,
      `${dec(f.serial.latency.p50, 1)} µs`,
      `${dec(f.serial.latency.p99, 1)} µs`
    ]),
    ...raw.floors.map((f) => [
      `${floorName[f.client]}, 64 loops on distinct keys, acquire + release pairs`,
      `${int(f.distinctOpsPerSecond)} pairs/s`,
      "",
      ""
    ])
  ]
  return `### Raw limit: Redis and ioredis without a lock library

${table(["Client", "Requests/s", "p50", "p99"], rows)}

\`${raw.fifty.command.replace(/-n \d+ -c 50/, "-n N -c C")}\`

Every call names a random lock out of a million (\`__rand_int__\` with \`-r 1000000\`), so it takes the
fresh-acquisition path of the script (EXISTS, HINCRBY, PEXPIRE, INCR, GET): the same work as a real
acquisition with a fencing token, not a busy reply. The 1 s lease keeps the key space small. The
single-client run is repeated once per serial round (${raw.single.length} runs of ${
    int(raw.single[0]?.requests ?? NaN)
  } calls; the
table gives the median p50), so that the serial target compares numbers taken minutes, not hours,
apart. The 50-client run shares this machine's ${results.machine.cores} cores with the server, so it is a floor for the
server's throughput, not a ceiling. The ioredis rows run effect-lock's own acquire and release
scripts from this Node process on a bare client, once with ioredis' defaults and once with
auto-pipelining on (effect-lock's command connection has it off): what any Node lock doing two round
trips pays before adding anything of its own. The *backend primitives* rows run the same two scripts
through effect-lock's \`RedisBackend\` (its \`tryAcquire\` and \`release\`, as Effects, on its own
connection), with no hold, watchdog or guarded program around them: the step between the bare pair
and a whole \`withLock\` (section *Where effect-lock's time goes*).
`
}

const serialSection = (results: BenchResults) => {
  const rows = ok(results.serial).map((r: SerialResult) => [
    r.library,
    int(r.opsPerSecond),
    `${dec(r.latency.p50, 1)} µs`,
    `${dec(r.latency.p99, 1)} µs`,
    `${dec(r.cpuMicrosPerOp, 0)} µs`,
    r.serverMicrosPerOp === undefined ? "" : `${dec(r.serverMicrosPerOp, 1)} µs`,
    int(r.latency.count)
  ])
  return `### a. Serial: one fiber, uncontended key

${
    table(["Library", "Ops/s", "p50", "p99", "CPU per op", "Redis CPU per op", "Samples"], [
      ...rows,
      ...failedRows(results.serial, 7)
    ])
  }

Each library runs in ${
    ok(results.serial)[0]?.rounds ?? 0
  } rounds of 0.8 s (after 0.3 s of warm-up), taking turns with the other
libraries and the raw references; the table pools the rounds.

One operation is a whole \`withLock\` (or the peer's equivalent) around an empty critical section: acquire,
release, and whatever the library does around them (leases, watchdog timers, spans). *CPU per op*
is this process's user + system time over the measured windows divided by the operations (the
server's CPU is not in it). *Redis CPU per op* is the server's time in commands over the same
windows (\`INFO commandstats\`), divided by the operations: what each library's scripts and commands
cost the server, which bounds what it can serve when many callers share it.
`
}

const distinctSection = (results: BenchResults) => {
  const rows = ok(results.distinct).map((r) => [r.library, int(r.opsPerSecond), int(r.failures)])
  return `### b. Throughput: 64 fibers on distinct keys

${table(["Library", "Ops/s", "Failures"], [...rows, ...failedRows(results.distinct, 3)])}

Each library runs in ${
    ok(results.distinct)[0]?.rounds ?? 0
  } rounds of 0.9 s (after 0.3 s of warm-up), taking turns with the others.
`
}

/** "two raw round trips: N µs" for the hand-off text, when the raw limit was measured. */
const raw2 = (results: BenchResults) =>
  results.raw !== undefined && !isFailed(results.raw)
    ? `two raw \`EVALSHA\` round trips at ${dec(2 * results.raw.singleP50 * 1000, 0)} µs for comparison`
    : "no raw measurement in this run"

const handoffSection = (results: BenchResults) => {
  const rows = ok(results.handoff).map((r: HandoffResult) => [
    r.library,
    int(r.acquisitionsPerSecond),
    `${dec(r.wait.p50, 1)} ms`,
    `${dec(r.wait.p99, 1)} ms`,
    `${int(r.gap.p50)} µs`,
    `${r.minPerWorker} / ${r.maxPerWorker}`,
    dec(r.fairness, 2),
    `${dec(r.regrabs * 100, 0)} %`,
    int(r.overlaps),
    r.failures.length === 0 ? "" : r.failures.join("; "),
    dec(r.seconds, 1)
  ])
  return `### c. Hand-off: 16 workers, one key, ~1 ms inside, ~1 ms outside

${
    table(
      [
        "Library",
        "Acquisitions/s",
        "Wait p50",
        "Wait p99",
        "Hand-off gap p50",
        "Min / max per worker",
        "Fairness",
        "Re-grabs",
        "Overlaps",
        "Errors",
        "Seconds"
      ],
      [...rows, ...failedRows(results.handoff, 11)]
    )
  }

The hold and the work outside are \`Effect.sleep("1 millis")\`, which a timer makes a little over 1 ms
(about ${dec(holdMillis(results) ?? NaN, 2)} ms here). With 16 workers the lock is wanted nearly all the
time, so a perfect lock would pass it on the moment it is released: at most about
${int(1000 / (holdMillis(results) ?? NaN))} acquisitions/s, and every worker waiting for the other 15
(roughly 15 × the hold). *Wait* is from asking for the lock to running inside it. *Hand-off gap* is
from one holder leaving the critical section to the next one entering it: the release, the
notification or the poll that finds the lock free, and the acquisition; for effect-lock, whose 16
workers share one process, a single hand-over call that releases and grants at once (with
${
    raw2(results)
  }). *Fairness* is the fewest acquisitions any worker got divided by the most. *Re-grabs* is the share of acquisitions that went to
the worker that had just released: it came back after its 1 ms outside and found the lock free
because the others were still sleeping out their poll interval. A polling lock can post a high rate
that way while most workers starve; the fairness and wait columns show the price. *Overlaps* counts
a worker entering while another was inside (an in-process counter): it must be 0.
`
}

const waitersSection = (results: BenchResults) => {
  const rows = ok(results.waiters).map((r) => [
    r.library,
    `${r.connectionsIdle} → ${r.connectionsWaiting}`,
    mib(r.rssDeltaBytes),
    mib(r.heapDeltaBytes),
    int(r.waitingCommandsPerSecond),
    dec(r.commandsPerAcquisition, 2),
    r.breakdown.map(([name, perAcq]) => `${name} ${perAcq < 0.01 ? "<0.01" : dec(perAcq, 2)}`).join(", "),
    dec(r.serverCallsPerAcquisition, 1),
    `${int(r.acquisitions)}${r.capped ? " (cap)" : ""}`,
    `${dec(r.drainSeconds, 2)} s`,
    int(r.overlaps)
  ])
  const header = [
    "Library",
    "Connections (idle → waiting)",
    "RSS",
    "Heap",
    "Commands/s while waiting",
    "Commands per acquisition",
    "By command",
    "Server calls per acquisition",
    "Acquisitions",
    "Drain",
    "Overlaps"
  ]
  const notes = ok(results.waiters)
    .filter((r) => r.failures.length > 0)
    .map((r) => `- ${r.library}: ${r.failures.join("; ")}`)
  return `### d. 1,000 waiters on one key

${table(header, [...rows, ...failedRows(results.waiters, header.length)])}
${notes.length > 0 ? `\nErrors reported by waiters:\n\n${notes.join("\n")}\n` : ""}
One holder takes the key, 1,000 fibers ask for it, and after a second of waiting the holder lets go;
each waiter then takes the lock once (an empty critical section). *Connections* are the server's
\`CLIENT LIST\` entries other than the bench's admin connection, before the waiters came and at most
while they waited. *RSS* and *heap* are this process's growth while 1,000 wait, each measured after a
full garbage collection. *Commands/s while waiting* is what waiting alone costs the server while
nobody can get in. *Commands per acquisition* divides the commands the clients sent (counted by the
server, \`INFO commandstats\` after \`CONFIG RESETSTAT\`) over the holder and every waiter by the
number of acquisitions; it includes each acquisition's release. *Server calls* adds the calls Lua
scripts make inside Redis. *Drain* is from the holder's release until the last waiter was through.
`
}

const reentrantSection = (results: BenchResults) => {
  const rows = ok(results.reentrant).map((r) => [
    r.library,
    r.reentrant ? "yes" : "no",
    r.nanosPerNested === undefined ? "" : `${int(r.nanosPerNested)} ns`,
    r.nanosPerBaseline === undefined ? "" : `${int(r.nanosPerBaseline)} ns`,
    r.redisCommandsDuringLoop === undefined ? "" : int(r.redisCommandsDuringLoop),
    r.nestedOutcome
  ])
  return `### e. Reentrant acquire: a nested lock on a key the caller holds

${
    table(
      [
        "Library",
        "Reentrant",
        "Nested acquire",
        "Loop without it",
        "Redis commands during the loop",
        "A nested acquire on the held key"
      ],
      [...rows, ...failedRows(results.reentrant, 6)]
    )
  }

Inside \`withLock(key, ...)\`, a loop runs \`withLock(key, Effect.void)\` again and again; *nested acquire*
is its time per iteration, next to the same loop with a bare \`Effect.void\`. The server's command
counters are read before and after the loop. The peers tie a lock to one acquire call rather than to
an owner, so a nested acquire of the same key waits for the outer one: the bench shows it with one
nested attempt that gives up after 300 ms.
`
}

// --- document ---------------------------------------------------------------------------------------

export const renderMarkdown = (results: BenchResults): string => {
  const m = results.machine
  const libraryRows = results.libraries.map((
    l
  ) => [`${l.name} ${l.version}`, l.usage, l.waiting, l.reentrant ? "yes" : "no"])
  const problems = [
    ...results.unhandledRejections.map((e) => `- unhandled rejection: ${e}`),
    ...Array.from(new Set(results.backgroundErrors)).slice(0, 20).map((e) => `- ${e}`)
  ]
  return `# Benchmarks

<!-- Generated by \`npm run bench\` (bench/run.ts). Do not edit by hand: re-run it. -->

effect-lock next to the locks people would otherwise pick for Node and Redis, and next to the raw
limit of Redis itself, all in one run on one machine: **${results.date.slice(0, 10)}**, \`${results.command}\`,
${dec(results.seconds, 0)} s in total, effect-lock at \`${results.revision}\`.

![Hand-off acquisitions/s, serial and distinct-key operations/s per library](benchmarks.svg)

## Targets

${renderTargets(results)}

${targetContext(results).map((line) => `- ${line}`).join("\n")}

Ratios come from this run only. They are reported here, never asserted in unit tests: timings on a
shared machine are not a pass/fail signal.

## Machine

${
    table(["", ""], [
      ["CPU", `${m.cpu}, ${m.cores} cores`],
      ["Memory", `${m.memoryGiB} GiB`],
      ["OS", m.os],
      ["Node.js", m.node],
      ["Redis", `${m.redis}, on loopback, \`--save "" --appendonly no\`, in the same machine`],
      ["Load average (1 min)", `${dec(m.loadAverage[0], 2)} at the start, ${dec(m.loadAverage[1], 2)} at the end`]
    ], "--- | ---")
  }

## Libraries

${
    table(
      ["Library", "Used as", "How a waiter learns the lock is free", "Reentrant"],
      libraryRows,
      "--- | --- | --- | :---:"
    )
  }

Each library runs in its documented, default configuration (redlock with \`retryCount: -1\` so that it
waits as long as the others do). Polling intervals are the libraries' own defaults on purpose: that is
what their users get.

## Results

${rawSection(results)}
${serialSection(results)}
${distinctSection(results)}
${handoffSection(results)}
${waitersSection(results)}
${reentrantSection(results)}
${promiseSection(results)}
${memorySection(results)}
${ladderSection(results)}
${scaleSection(results)}
${readHeavySection(results)}
${fairHandoffSection(results)}
${replicaSyncSection(results)}
${semaphoreSection(results)}
${clusterSection(results)}
${redlockSection(results)}
${problems.length > 0 ? `### Problems seen during the run\n\n${problems.join("\n")}\n` : ""}
## How to read this

- **One process, one server, one machine.** Every library runs in the same Node process, one after
  the other, against the same \`redis-server\` on loopback, started by the bench on a free port with
  persistence off. Between libraries the bench runs \`FLUSHALL\` and opens fresh clients; each
  scenario warms up before it measures. Latency here is mostly the kernel's loopback and the two
  processes' CPU time, so absolute numbers are small and differences in client-side work show
  plainly. Across a network every round trip grows by the network's latency, which favours
  libraries that make fewer of them.
- **Fibers for everyone.** The bench drives every library from Effect fibers. The promise-based peers
  are wrapped in \`Effect.async\` (well under a microsecond per call), and each peer gets the plain
  \`new Redis(url)\` its README shows. effect-lock uses \`RedisBackend.layer({ url })\`, which opens one
  command connection and one subscriber connection, and runs from its build (\`dist/\`, made by
  \`npm run build\` before the bench starts), as its users run it.
- **Polling is part of the result.** redlock retries every 200 ± 100 ms, redis-semaphore every
  10 ms, effect-distributed-lock every 100 ms (plus a pub/sub subscription per waiter). A waiter on
  effect-lock sleeps until a release in its own process hands it the lock (in that release's round
  trip), or a release notification (or its retry schedule, or the holder's lease) wakes it. Hand-off speed, wait times, fairness and command counts under contention follow from that.
- **Latency percentiles** are nearest-rank over every operation in the measuring window. p99 on a
  2-core machine that also runs Redis includes garbage-collection pauses and scheduling noise.
- **Caps.** Measuring windows are fixed (serial 3 × 0.8 s, distinct keys 3 × 0.9 s, hand-off 4 s per
  library after 0.5 s of warm-up); the 1,000-waiter drain is capped at 12 s, and a library that had not
  served every waiter by then is marked *(cap)* with the acquisitions it did serve.

## Re-running

\`\`\`sh
npm run bench                                   # everything; rewrites this page and benchmarks.svg
BENCH_LIBS=effect-lock npm run bench            # one library, printed to the console only
BENCH_SCENARIOS=serial,handoff BENCH_SCALE=0.5 npm run bench   # a quick look at two scenarios
BENCH_SCENARIOS=redlock npm run bench           # Redlock alone (o: its own 3 and 5 servers)
REDIS_URL=redis://127.0.0.1:6379 npm run bench  # an existing loopback server (it gets flushed)
\`\`\`

\`redis-server\` and \`redis-benchmark\` must be on the \`PATH\` (Debian: \`redis-server\`, \`redis-tools\`).
The code is in \`bench/\`: one module per scenario in \`bench/scenarios/\`, the libraries behind one
interface in \`bench/peers.ts\`, this page in \`bench/report.ts\` and the chart in \`bench/svg.ts\`.
`
}
