/**
 * The targets of issue #9, each with what this run measured, the ratio and whether it was met.
 * Reported, never asserted: timings on a shared machine are not a pass/fail signal.
 */
import { best, dec, holdMillis, int, mark, ok, peers, ratio, subject, table } from "./format.js"
import type { BenchResults } from "./results.js"
import { isFailed } from "./results.js"
import type { SerialResult } from "./scenarios/serial.js"

export interface TargetRow {
  readonly target: string
  readonly measured: string
  readonly ratio: string
  readonly met: boolean | undefined
}

const KIB = 1024
const FLOOR = "ioredis pair (floor)"

/** The bare ioredis pair (default options), in the serial scenario. */
const serialFloor = (results: BenchResults) => {
  const raw = results.raw !== undefined && !isFailed(results.raw) ? results.raw : undefined
  return raw?.floors.find((f) => f.client === "default")?.serial
}

/** Serial-shaped rows: p50 against the floor and the best peer, and CPU per operation. */
const serialRows = (
  label: string,
  ours: SerialResult | undefined,
  others: ReadonlyArray<SerialResult>,
  floor: { readonly latency: { readonly p50: number }; readonly cpuMicrosPerOp: number } | undefined,
  withCpu: boolean
): Array<TargetRow> => {
  const rows: Array<TargetRow> = []
  if (ours === undefined) return rows
  if (floor !== undefined) {
    const r = ours.latency.p50 / floor.latency.p50
    rows.push({
      target: `${label} p50 ≤ 1.1 × the bare ioredis pair`,
      measured: `${dec(ours.latency.p50, 1)} µs vs ${dec(floor.latency.p50, 1)} µs`,
      ratio: ratio(r),
      met: r <= 1.1
    })
  }
  const fastest = best(others, (p) => p.latency.p50, true)
  if (fastest !== undefined) {
    const r = ours.latency.p50 / fastest.latency.p50
    rows.push({
      target: `${label} p50 ≤ the best peer's`,
      measured: `${dec(ours.latency.p50, 1)} µs vs ${dec(fastest.latency.p50, 1)} µs (${fastest.library})`,
      ratio: ratio(r),
      met: r <= 1
    })
  }
  const leanest = best(others, (p) => p.cpuMicrosPerOp, true)
  if (withCpu && leanest !== undefined) {
    const r = ours.cpuMicrosPerOp / leanest.cpuMicrosPerOp
    rows.push({
      target: `${label} CPU per operation ≤ the best peer's`,
      measured: `${dec(ours.cpuMicrosPerOp, 0)} µs vs ${dec(leanest.cpuMicrosPerOp, 0)} µs (${leanest.library})${
        floor === undefined ? "" : `; bare pair ${dec(floor.cpuMicrosPerOp, 0)} µs`
      }`,
      ratio: ratio(r),
      met: r <= 1
    })
  }
  return rows
}

export const targets = (results: BenchResults): ReadonlyArray<TargetRow> => {
  const rows: Array<TargetRow> = []

  // 1, 2: serial, from fibers.
  rows.push(...serialRows("1–2. Serial", subject(results.serial), peers(results.serial), serialFloor(results), true))

  // 3: distinct keys.
  const distinct = subject(results.distinct)
  const distinctPeer = best(peers(results.distinct), (p) => p.opsPerSecond)
  if (distinct !== undefined && distinctPeer !== undefined) {
    const r = distinct.opsPerSecond / distinctPeer.opsPerSecond
    rows.push({
      target: "3. 64 fibers on distinct keys ≥ 1.2 × the best peer",
      measured: `${int(distinct.opsPerSecond)} ops/s vs ${int(distinctPeer.opsPerSecond)} (${distinctPeer.library})`,
      ratio: ratio(r),
      met: r >= 1.2
    })
  }

  // 4: hand-off.
  const handoff = subject(results.handoff)
  const handoffPeers = peers(results.handoff)
  const fastestPeer = best(handoffPeers, (p) => p.acquisitionsPerSecond)
  if (handoff !== undefined && fastestPeer !== undefined) {
    const r = handoff.acquisitionsPerSecond / fastestPeer.acquisitionsPerSecond
    rows.push({
      target: "4. Hand-off acquisitions/s ≥ 1.5 × the best peer",
      measured: `${int(handoff.acquisitionsPerSecond)} /s vs ${
        int(fastestPeer.acquisitionsPerSecond)
      } (${fastestPeer.library})`,
      ratio: ratio(r),
      met: r >= 1.5
    })
  }
  const steadiestPeer = best(handoffPeers.filter((p) => p.wait.count > 0), (p) => p.wait.p99, true)
  if (handoff !== undefined && steadiestPeer !== undefined) {
    const r = steadiestPeer.wait.p99 / handoff.wait.p99
    rows.push({
      target: "4. Hand-off wait p99 ≤ 1/10 of the best peer's",
      measured: `${dec(handoff.wait.p99, 1)} ms vs ${dec(steadiestPeer.wait.p99, 1)} ms (${steadiestPeer.library})`,
      ratio: `1/${dec(r, 1)}`,
      met: r >= 10
    })
  }
  if (handoff !== undefined) {
    rows.push({
      target: "4. Hand-off fairness (min/max acquisitions per worker) ≥ 0.9",
      measured: `${handoff.minPerWorker} / ${handoff.maxPerWorker}`,
      ratio: dec(handoff.fairness, 2),
      met: handoff.fairness >= 0.9
    })
    rows.push({
      target: "4. Hand-off overlaps = 0",
      measured: `${handoff.overlaps}`,
      ratio: "",
      met: handoff.overlaps === 0
    })
  }

  // 5: scale.
  const scale = results.atScale !== undefined && !isFailed(results.atScale) ? results.atScale : undefined
  if (scale !== undefined) {
    rows.push(
      {
        target: `5. ${int(scale.holds)} holds: heap per hold ≤ 1 KiB`,
        measured: `${int(scale.heapPerHoldBytes)} B`,
        ratio: ratio(scale.heapPerHoldBytes / KIB),
        met: scale.heapPerHoldBytes <= KIB
      },
      {
        target: `5. ${int(scale.holds)} holds: ≤ 100 Redis round trips per renew period`,
        measured: `${dec(scale.commandsPerRenewPeriod, 1)} commands per renewal of every hold`,
        ratio: "",
        met: scale.commandsPerRenewPeriod <= 100
      },
      {
        target: "5. Event-loop delay p99 ≤ 20 ms during renewals",
        measured: `${dec(scale.eventLoopDelayP99Millis, 1)} ms`,
        ratio: "",
        met: scale.eventLoopDelayP99Millis <= 20
      },
      { target: "5. 0 holds lost", measured: `${scale.lostHolds}`, ratio: "", met: scale.lostHolds === 0 },
      {
        target: `5. ${int(scale.waiters)} waiters on ${scale.keys} keys: ≤ 2 connections`,
        measured: `${scale.connectionsWaiting}`,
        ratio: "",
        met: scale.connectionsWaiting <= 2
      },
      {
        target: "5. … ≤ 2 KiB heap per waiter",
        measured: `${int(scale.heapPerWaiterBytes)} B`,
        ratio: ratio(scale.heapPerWaiterBytes / (2 * KIB)),
        met: scale.heapPerWaiterBytes <= 2 * KIB
      },
      {
        target: "5. … ≤ 3 commands per acquisition",
        measured: `${dec(scale.commandsPerAcquisition, 2)} (${int(scale.acquired)} of ${int(scale.waiters)} served in ${
          dec(scale.drainSeconds, 1)
        } s)`,
        ratio: "",
        met: scale.commandsPerAcquisition <= 3 && scale.acquired === scale.waiters
      }
    )
  }

  // 6: memory backend.
  const memory = results.memory !== undefined && !isFailed(results.memory) ? results.memory : undefined
  if (memory !== undefined) {
    rows.push(
      {
        target: "6. Memory backend: uncontended `withLock` ≤ 5 µs CPU",
        measured: `${dec(memory.uncontendedCpuMicros, 2)} µs`,
        ratio: ratio(memory.uncontendedCpuMicros / 5),
        met: memory.uncontendedCpuMicros <= 5
      },
      {
        target: "6. Memory backend: nested reentrant `withLock` ≤ 1 µs CPU",
        measured: `${dec(memory.reentrantCpuMicros, 2)} µs`,
        ratio: ratio(memory.reentrantCpuMicros / 1),
        met: memory.reentrantCpuMicros <= 1
      }
    )
  }

  // 7: promise-land.
  const promise = ok(results.promise ?? [])
  const floor = promise.find((p) => p.library === FLOOR)
  const promisePeers = promise.filter((p) => p.library !== FLOOR && !p.library.startsWith("effect-lock"))
  for (const ours of promise.filter((p) => p.library.startsWith("effect-lock"))) {
    rows.push(
      ...serialRows(`7. Promise-land, ${ours.library.replace("effect-lock ", "")},`, ours, promisePeers, floor, false)
    )
  }

  // Kept from the first benchmark issue.
  const waiters = subject(results.waiters)
  if (waiters !== undefined) {
    rows.push(
      {
        target: "≤ 2 Redis connections with 1,000 waiters",
        measured: `${waiters.connectionsWaiting}`,
        ratio: "",
        met: waiters.connectionsWaiting <= 2
      },
      {
        target: "≤ 3 Redis commands per contended acquisition (1,000 waiters, release included)",
        measured: `${dec(waiters.commandsPerAcquisition, 2)}`,
        ratio: "",
        met: waiters.commandsPerAcquisition <= 3
      }
    )
  }
  const reentrant = subject(results.reentrant)
  if (reentrant?.redisCommandsDuringLoop !== undefined) {
    rows.push({
      target: "Reentrant acquire makes no Redis call",
      measured: `${reentrant.redisCommandsDuringLoop} commands in ${int(reentrant.iterations ?? NaN)} nested acquires`,
      ratio: "",
      met: reentrant.redisCommandsDuringLoop === 0
    })
  }
  return rows
}

/** Facts from the same run that bound what any library could reach on the targets. */
export const targetContext = (results: BenchResults): ReadonlyArray<string> => {
  const raw = results.raw !== undefined && !isFailed(results.raw) ? results.raw : undefined
  const lines: Array<string> = []
  if (raw !== undefined) {
    const twoTrips = 2 * raw.singleP50 * 1000
    const floor = serialFloor(results)
    if (floor !== undefined) {
      lines.push(
        `Two round trips of the C client \`redis-benchmark\` take ${
          dec(twoTrips, 0)
        } µs at the median; a bare ioredis ` +
          `acquire + release pair from this Node process takes ${dec(floor.latency.p50, 1)} µs ` +
          `(${ratio(floor.latency.p50 / twoTrips)} as long) and ${
            dec(floor.cpuMicrosPerOp, 0)
          } µs of CPU, before any ` +
          "lock library adds anything: that pair is the floor of targets 1 and 7."
      )
    }
    const distinctPeer = best(peers(results.distinct), (p) => p.opsPerSecond)
    const fastestFloor = best(raw.floors.filter((f) => f.client !== "primitives"), (f) => f.distinctOpsPerSecond)
    if (distinctPeer !== undefined && fastestFloor !== undefined) {
      lines.push(
        `64 bare ioredis loops reach ${int(fastestFloor.distinctOpsPerSecond)} acquire + release pairs/s, ` +
          `${ratio(fastestFloor.distinctOpsPerSecond / distinctPeer.opsPerSecond)} the best peer: the ceiling for a ` +
          "library on ioredis in this process."
      )
    }
  }
  const oursSerial = subject(results.serial)
  const cheapestPeer = best(
    peers(results.serial).filter((p) => p.serverMicrosPerOp !== undefined),
    (p) => -(p.serverMicrosPerOp ?? 0)
  )
  if (oursSerial?.serverMicrosPerOp !== undefined && cheapestPeer?.serverMicrosPerOp !== undefined) {
    lines.push(
      `Each uncontended acquire + release costs the Redis server ${dec(oursSerial.serverMicrosPerOp, 1)} µs of CPU ` +
        `with effect-lock (two scripts: a Redisson-layout hash, a fencing counter, a release notification) and ` +
        `${dec(cheapestPeer.serverMicrosPerOp, 1)} µs with ${cheapestPeer.library}; when 64 callers share one server ` +
        "that shares this machine's cores, the server's share bounds target 3."
    )
  }
  const hold = holdMillis(results)
  if (hold !== undefined) {
    lines.push(
      `A hold of \`Effect.sleep("1 millis")\` took about ${dec(hold, 2)} ms here (effect-lock's time per ` +
        `acquisition minus its hand-off gap), so a lock that passed on the moment it was released would ` +
        `reach about ${int(1000 / hold)} hand-offs/s.`
    )
  }
  return lines
}

export const renderTargets = (results: BenchResults): string =>
  table(
    ["Target", "Measured", "Ratio", "Met"],
    targets(results).map((row) => [row.target, row.measured, row.ratio, mark(row.met)]),
    "--- | --- | ---: | :---:"
  )
