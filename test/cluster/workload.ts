/**
 * The fenced workload of the cluster's topology tests (failover, slot migration): fibers on
 * several backends take locks again and again and, holding one, do a fenced read-modify-write of
 * a counter kept on another shard, the way chaos/resources.ts does it: a **claim** (a
 * `Fencing.redisSet` of a claim key that raises the resource's highest token to ours, refused if a
 * newer one is there) and a GET, then the write (a `Fencing.redisSet` of the counter), both fenced
 * by one fence key. A section whose claim and write were both accepted is an accepted write.
 *
 * What the checks read from it: accepted sections of one key never overlap in time (timed with
 * `process.hrtime`, one clock for the whole process), the counter equals the number of accepted
 * writes (no lost update), every `withLock` that failed failed with a typed error, each counted by
 * tag and reason, and a section the fence refused belongs to a `withLock` that failed with
 * `LockLostError` (its holder was told).
 */
import type { Context } from "effect"
import type { Duration } from "effect"
import { Effect, Either, Ref, Schedule } from "effect"
import type { Cluster } from "ioredis"
import type { LockBackend } from "../../src/index.js"
import { Fencing, withLock } from "../../src/index.js"
import { hashSlot } from "../../src/internal/redis/slot.js"
import type { ClusterNodeInfo } from "../support/redisCluster.js"

export interface Section {
  readonly key: string
  readonly backend: number
  readonly token: bigint
  readonly start: bigint
  readonly end: bigint
  /** Both the claim and the write were accepted by the fence. */
  readonly accepted: boolean
  /**
   * How its `withLock` ended: `"ok"`, or the failure's label (see `Workload.failures`); set once
   * the `withLock` has returned.
   */
  outcome: string
}

/** The resource of one lock key: three keys sharing one hash tag (one slot). */
export interface Resource {
  readonly counter: string
  readonly claim: string
  readonly fence: string
}

export const resourceOf = (tag: string): Resource => ({
  counter: `{${tag}}:counter`,
  claim: `{${tag}}:claim`,
  fence: `{${tag}}:fence`
})

export interface Workload {
  readonly sections: ReadonlyArray<Section>
  /** `withLock` failures, `"<tag>"` or `"<tag>:<reason>"`, counted. */
  readonly failures: ReadonlyMap<string, number>
}

/** Accepted sections of one key that overlap in time, as pairs of indexes into `sections`. */
export const overlaps = (sections: ReadonlyArray<Section>): ReadonlyArray<readonly [Section, Section]> => {
  const found: Array<readonly [Section, Section]> = []
  const byKey = new Map<string, Array<Section>>()
  for (const s of sections) {
    if (!s.accepted) continue
    byKey.set(s.key, [...(byKey.get(s.key) ?? []), s])
  }
  for (const list of byKey.values()) {
    const sorted = [...list].sort((a, b) => (a.start < b.start ? -1 : a.start > b.start ? 1 : 0))
    for (let i = 1; i < sorted.length; i++) {
      if (sorted[i]!.start <= sorted[i - 1]!.end) found.push([sorted[i - 1]!, sorted[i]!])
    }
  }
  return found
}

/**
 * Sections the fence refused whose `withLock` returned without `LockLostError`: a holder that lost
 * its lock and was not told. (A section whose `withLock` was still running when the workload
 * stopped has no verdict and is left out.)
 */
export const untold = (sections: ReadonlyArray<Section>): ReadonlyArray<Section> =>
  sections.filter((s) => !s.accepted && s.outcome !== "pending" && !s.outcome.startsWith("LockLostError"))

/**
 * Run the workload until `stop` completes: on each backend (a built context), `fibers` fibers per
 * key, each looping `withLock(key, fenced increment)`. The counter of `resources[i]` belongs to
 * `keys[i]`.
 */
export const runWorkload = (options: {
  readonly backends: ReadonlyArray<Context.Context<LockBackend>>
  readonly keys: ReadonlyArray<string>
  readonly resources: ReadonlyArray<Resource>
  readonly resource: Cluster
  readonly fibers: number
  readonly stop: Effect.Effect<void>
  readonly lease?: Duration.DurationInput | undefined
  /** Where the sections are recorded as they end (a fresh one when not given). */
  readonly sections?: Ref.Ref<ReadonlyArray<Section>> | undefined
}): Effect.Effect<Workload> =>
  Effect.gen(function*() {
    const sections = options.sections ?? (yield* Ref.make<ReadonlyArray<Section>>([]))
    const failures = new Map<string, number>()
    const { resource } = options

    const increment = (key: string, res: Resource, backend: number, recorded: (section: Section) => void) =>
      withLock(key, (lease) =>
        Effect.gen(function*() {
          const token = lease.fencingToken
          const start = process.hrtime.bigint()
          const claimed = yield* Effect.either(
            Fencing.redisSet(resource, { key: res.claim, value: lease.owner, token, fenceKey: res.fence })
          )
          let accepted = false
          if (Either.isRight(claimed)) {
            const read = Number((yield* Effect.promise(() => resource.get(res.counter))) ?? "0")
            yield* Effect.sleep(5)
            const written = yield* Effect.either(
              Fencing.redisSet(resource, { key: res.counter, value: String(read + 1), token, fenceKey: res.fence })
            )
            accepted = Either.isRight(written)
          }
          const end = process.hrtime.bigint()
          const section: Section = { key, backend, token, start, end, accepted, outcome: "pending" }
          recorded(section)
          yield* Ref.update(sections, (all) => [...all, section])
        }).pipe(
          // Stopping the workload must not land between an accepted write and its record (the
          // counter would then be one ahead of the accepted sections); the body is a few ms.
          Effect.uninterruptible
        ), { lease: options.lease ?? "5 seconds", wait: "60 seconds" })

    const loop = (key: string, res: Resource, backend: number, context: Context.Context<LockBackend>) =>
      Effect.gen(function*() {
        for (;;) {
          let section: Section | undefined
          const result = yield* Effect.either(
            Effect.provide(increment(key, res, backend, (s) => (section = s)), context)
          )
          if (Either.isLeft(result)) {
            const error = result.left
            const label = error._tag === "LockLostError" ? `${error._tag}:${error.reason}` : error._tag
            failures.set(label, (failures.get(label) ?? 0) + 1)
            if (section !== undefined) section.outcome = label
            yield* Effect.sleep(50)
          } else if (section !== undefined) {
            section.outcome = "ok"
          }
        }
      })

    const fibers = options.backends.flatMap((context, backend) =>
      options.keys.flatMap((key, i) =>
        Array.from({ length: options.fibers }, () => loop(key, options.resources[i]!, backend, context))
      )
    )
    yield* Effect.raceFirst(
      Effect.all(fibers, { concurrency: "unbounded", discard: true }),
      options.stop
    )
    return { sections: yield* Ref.get(sections), failures }
  })

/**
 * Wait until every key of `keys` has had `count` accepted sections that started after `since`, or
 * `maxMillis` passed (the checks then say which key fell short). A lock whose release failed at the
 * switch stays held until its lease ends (5 s in the workload), so this takes a lease at most.
 */
export const awaitSectionsAfter = (
  sections: Ref.Ref<ReadonlyArray<Section>>,
  keys: ReadonlyArray<string>,
  since: bigint,
  count: number,
  maxMillis: number
): Effect.Effect<void> =>
  Effect.gen(function*() {
    const deadline = Date.now() + maxMillis
    while (Date.now() < deadline) {
      const all = yield* Ref.get(sections)
      const done = keys.every((key) =>
        all.filter((s) => s.key === key && s.accepted && s.start > since).length >= count
      )
      if (done) return
      yield* Effect.sleep(100)
    }
  })

/** Which master serves `key`, by one topology snapshot and the slot as Redis computes it. */
export const masterMap = (topology: ReadonlyArray<ClusterNodeInfo>) => (key: string): string => {
  const slot = hashSlot(key)
  const found = topology.find((n) => n.role === "master" && n.slots.some(([from, to]) => slot >= from && slot <= to))
  if (found === undefined) throw new Error(`no master serves slot ${slot}`)
  return found.id
}

/** `count` names `<label>:<pid>:<i>` whose slot `accept` takes (given the serving master's id). */
export const namesWhere = (
  masterOf: (key: string) => string,
  label: string,
  count: number,
  accept: (master: string) => boolean
): ReadonlyArray<string> => {
  const names: Array<string> = []
  for (let i = 0; names.length < count && i < 100_000; i++) {
    const name = `${label}:${process.pid}:${i}`
    if (accept(masterOf(name))) names.push(name)
  }
  if (names.length < count) throw new Error(`only ${names.length} names for ${label}`)
  return names
}

/**
 * Fork a waiter for `key` on `backend` that a topology change may meet with a typed
 * `LockBackendError`, as a caller would: it records each such error and asks again (every 200 ms,
 * up to 25 times). Its result is when it got in (`process.hrtime`) and its fencing token.
 */
export const forkRetryingWaiter = (key: string, backend: Context.Context<LockBackend>) =>
  Effect.gen(function*() {
    const failures = yield* Ref.make<ReadonlyArray<string>>([])
    const fiber = yield* Effect.fork(
      withLock(
        key,
        (lease) => Effect.sync(() => ({ at: process.hrtime.bigint(), token: lease.fencingToken })),
        {
          retry: Schedule.spaced("1 minute"),
          wait: "2 minutes"
        }
      ).pipe(
        Effect.provide(backend),
        Effect.tapErrorTag("LockBackendError", (error) => Ref.update(failures, (all) => [...all, error.message])),
        Effect.retry({
          while: (error) => error._tag === "LockBackendError",
          schedule: Schedule.spaced("200 millis"),
          times: 25
        })
      )
    )
    return { fiber, failures }
  })
