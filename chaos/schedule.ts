/**
 * The nemesis' schedule, a pure function of the seed and the campaign's shape: the same seed, the
 * same faults at the same offsets with the same targets and durations. Faults run one after
 * another, each healed before the next begins, with a random quiet gap between them.
 *
 * One choice is made at run time: a fault aimed at `holder` hits whichever worker holds the lock
 * at that instant, falling back to the seeded worker when nobody holds it. A `pause-worker` aimed
 * at `holder` waits (up to 1 s) for the next worker to finish reading the resources under the lock
 * and stops it there, between its read and its write: the window a stale write comes from.
 */

/** The faults the nemesis knows. */
export const faultKinds = [
  "pause-worker", // SIGSTOP a worker past its lease, then SIGCONT
  "kill-worker", // kill -9 a worker, start it again after `duration`
  "restart-redis", // kill -9 redis-server and start it again (AOF, fsync always) after `duration`
  "pause-redis", // CLIENT PAUSE <duration> ALL
  "stop-redis", // SIGSTOP redis-server for `duration`, then SIGCONT
  "client-kill", // CLIENT KILL of every normal and pub/sub connection but the nemesis' own
  "proxy-latency", // the worker's proxy delays every chunk by `latency` ms for `duration`
  "proxy-drop", // the worker's proxy swallows every byte both ways for `duration`, then resets its connections
  "proxy-half-open" // the worker's proxy swallows the server's replies for `duration`, then resets
] as const

export type FaultKind = (typeof faultKinds)[number]

export interface Fault {
  readonly index: number
  /** Offset from the campaign's start, ms. */
  readonly at: number
  readonly kind: FaultKind
  /** A worker index, or `holder` (see above), for the faults aimed at a worker. */
  readonly target: number | "holder" | "redis"
  /** How long the fault lasts before it is healed, ms (0 for instantaneous ones). */
  readonly duration: number
  /** `proxy-latency`: the delay per chunk, ms. */
  readonly latency?: number | undefined
}

export interface ScheduleOptions {
  readonly seed: number
  /** How long the nemesis runs, ms. */
  readonly nemesisMs: number
  readonly workers: number
  readonly leaseMs: number
  /** The kinds to draw from (default: all). */
  readonly kinds?: ReadonlyArray<FaultKind> | undefined
  /** The quiet gap between two faults: `[min, max]` ms. Default `[500, 2500]`. */
  readonly gapMs?: readonly [number, number] | undefined
}

/** mulberry32: a small, fast, well-mixed 32-bit generator; enough for a fault schedule. */
export const random = (seed: number) => {
  let state = seed >>> 0
  const next = (): number => {
    state = (state + 0x6d2b79f5) >>> 0
    let t = state
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
  return {
    next,
    /** A whole number in `[min, max]`. */
    int: (min: number, max: number) => min + Math.floor(next() * (max - min + 1)),
    pick: <A>(items: ReadonlyArray<A>): A => items[Math.floor(next() * items.length)]!
  }
}

/** The schedule for a seed. */
export const schedule = (options: ScheduleOptions): ReadonlyArray<Fault> => {
  const rng = random(options.seed)
  const kinds = options.kinds ?? faultKinds
  const [gapMin, gapMax] = options.gapMs ?? [500, 2500]
  const lease = options.leaseMs
  const faults: Array<Fault> = []
  let at = rng.int(gapMin, gapMax)
  while (kinds.length > 0) {
    const kind = rng.pick(kinds)
    const worker = rng.int(0, options.workers - 1)
    let fault: Omit<Fault, "index" | "at">
    switch (kind) {
      case "pause-worker":
        fault = {
          kind,
          target: rng.next() < 0.6 ? "holder" : worker,
          duration: Math.round(lease * (1.2 + rng.next() * 1.3))
        }
        break
      case "kill-worker":
        fault = { kind, target: rng.next() < 0.5 ? "holder" : worker, duration: rng.int(100, 1500) }
        break
      case "restart-redis":
        fault = { kind, target: "redis", duration: rng.int(0, 800) }
        break
      case "pause-redis":
      case "stop-redis":
        fault = { kind, target: "redis", duration: Math.round(lease * (0.3 + rng.next() * 1.2)) }
        break
      case "client-kill":
        fault = { kind, target: "redis", duration: 0 }
        break
      case "proxy-latency":
        fault = { kind, target: worker, duration: Math.round(lease * (0.5 + rng.next())), latency: rng.int(20, 400) }
        break
      case "proxy-drop":
      case "proxy-half-open":
        fault = { kind, target: worker, duration: Math.round(lease * (0.3 + rng.next() * 1.5)) }
        break
    }
    if (at + fault.duration > options.nemesisMs) break
    faults.push({ index: faults.length, at, ...fault })
    at += fault.duration + rng.int(gapMin, gapMax)
  }
  return faults
}
