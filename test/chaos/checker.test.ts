/**
 * The chaos checker on hand-made histories: a legal one passes, and each kind of violation is
 * flagged on a history that has exactly that flaw (and, where it matters, a near miss is not).
 */
import { assert, describe, it } from "@effect/vitest"
import { check } from "../../chaos/checker.js"
import type { Finals, HistoryRecord, ResourceName, ViolationKind } from "../../chaos/history.js"
import { schedule } from "../../chaos/schedule.js"

/** A small builder: operations as sequences of steps at given times. */
const history = () => {
  const records: Array<HistoryRecord> = []
  const op = (id: string, w: number, guarded = false) => {
    const self = {
      invoke: (mono: number) => {
        records.push({ t: "invoke", w, id, guarded, wall: mono, mono })
        return self
      },
      acquired: (mono: number, token: number) => {
        records.push({ t: "acquired", w, id, token: String(token), mono })
        return self
      },
      read: (mono: number, res: ResourceName, token: number, n: number, writer: string) => {
        records.push({ t: "read", w, id, res, token: String(token), n, writer, entered: mono - 1, mono })
        return self
      },
      write: (mono: number, res: ResourceName, token: number, n: number, outcome: "ok" | "refused" | "unknown") => {
        records.push({ t: "write", w, id, res, token: String(token), n, mono })
        records.push({ t: "wrote", w, id, res, outcome, mono: mono + 2 })
        return self
      },
      end: (mono: number, outcome: "ok" | "lost" | "refused" = "ok") => {
        records.push({ t: "end", w, id, outcome, wall: mono, mono })
        return self
      }
    }
    return self
  }
  return { records, op }
}

const final = (n: number, writer: string, token = 0): Finals => ({ redis: { n, writer, token: String(token) } })
const options = { recoveryBoundMs: 1000, workers: [] as ReadonlyArray<number> }
const kinds = (
  violations: ReadonlyArray<{ readonly kind: ViolationKind }>
) => [...new Set(violations.map((v) => v.kind))]

/** Two operations one after the other, both accepted: legal. */
const legal = () => {
  const h = history()
  h.op("a", 0).invoke(0).acquired(10, 1).read(11, "redis", 1, 0, "").write(20, "redis", 1, 1, "ok").end(30)
  h.op("b", 1).invoke(5).acquired(40, 2).read(41, "redis", 2, 1, "a").write(50, "redis", 2, 2, "ok").end(60)
  return h
}

describe("chaos checker", () => {
  it("passes a legal history", () => {
    const h = legal()
    const result = check(h.records, final(2, "b", 2), options)
    assert.deepStrictEqual(result.violations, [])
    assert.strictEqual(result.summary.operations, 2)
    assert.strictEqual(result.summary.writes.redis?.ok, 2)
  })

  it("flags lost-update: two accepted writes that read the same value", () => {
    const h = history()
    h.op("a", 0).invoke(0).acquired(10, 1).read(11, "redis", 1, 0, "").write(30, "redis", 1, 1, "ok").end(40)
    h.op("b", 1).invoke(0).acquired(20, 2).read(21, "redis", 2, 0, "").write(50, "redis", 2, 1, "ok").end(60)
    const { violations } = check(h.records, final(1, "b", 2), options)
    assert.include(kinds(violations), "lost-update")
    const lost = violations.find((v) => v.kind === "lost-update")!
    assert.deepStrictEqual(lost.ops, ["a", "b"])
  })

  it("flags lost-update: a final value the history cannot explain (the counter is not the accepted increments)", () => {
    const h = legal()
    const { violations } = check(h.records, final(3, "nobody"), options)
    assert.deepStrictEqual(kinds(violations), ["lost-update"])
  })

  it("flags token-order: an older token written after a newer one", () => {
    const h = history()
    h.op("b", 1).invoke(0).acquired(10, 2).read(11, "redis", 2, 0, "").write(20, "redis", 2, 1, "ok").end(30)
    h.op("a", 0).invoke(0).acquired(5, 1).read(40, "redis", 1, 1, "b").write(50, "redis", 1, 2, "ok").end(60)
    const { violations } = check(h.records, final(2, "a", 2), options)
    assert.include(kinds(violations), "token-order")
  })

  it("flags duplicate-token: one token granted twice", () => {
    const h = history()
    h.op("a", 0).invoke(0).acquired(10, 7).end(20)
    h.op("b", 1).invoke(0).acquired(30, 7).end(40)
    const { violations } = check(h.records, {}, options)
    assert.deepStrictEqual(kinds(violations), ["duplicate-token"])
  })

  it("flags phantom-write: a write reported refused that the resource applied", () => {
    const h = history()
    h.op("a", 0).invoke(0).acquired(10, 1).read(11, "redis", 1, 0, "").write(20, "redis", 1, 1, "refused").end(30)
    const { violations } = check(h.records, final(1, "a", 1), options)
    assert.deepStrictEqual(kinds(violations), ["phantom-write"])
  })

  it("flags uncovered-write: a write accepted after a newer token claimed the resource", () => {
    const h = history()
    h.op("a", 0).invoke(0).acquired(10, 1).read(11, "redis", 1, 0, "").write(40, "redis", 1, 1, "ok").end(50)
    // b claimed (and read) with token 2 before a's write started; it then lost the lock, writing nothing
    h.op("b", 1).invoke(0).acquired(20, 2).read(30, "redis", 2, 0, "").end(60, "lost")
    const { violations } = check(h.records, final(1, "a", 1), options)
    assert.deepStrictEqual(kinds(violations), ["uncovered-write"])
  })

  it("flags unnoticed-loss: a guarded write let through after the lock went to a newer token", () => {
    const make = (guarded: boolean) => {
      const h = history()
      h.op("a", 0, guarded).invoke(0).acquired(10, 1).read(11, "redis", 1, 0, "").write(40, "redis", 1, 1, "ok")
        .end(50)
      h.op("b", 1).invoke(0).acquired(30, 2).end(60, "lost")
      return check(h.records, final(1, "a", 1), options).violations
    }
    assert.deepStrictEqual(kinds(make(true)), ["unnoticed-loss"])
    // unguarded writes are the resource's to refuse: b never claimed it, so nothing is wrong
    assert.deepStrictEqual(make(false), [])
  })

  it("flags defect: a defect or unhandled rejection in a worker", () => {
    const h = legal()
    h.records.push({ t: "defect", w: 1, message: "unhandled rejection: boom", mono: 45 })
    const { violations } = check(h.records, final(2, "b", 2), options)
    assert.deepStrictEqual(kinds(violations), ["defect"])
  })

  it("flags no-recovery: a worker that does not get the lock back within the bound", () => {
    const h = legal()
    h.records.push({ t: "nemesis-stop", mono: 35 })
    // worker 0 never acquires after the stop; worker 1 does at 40 (5 ms later)
    const within = check(h.records, final(2, "b", 2), { recoveryBoundMs: 1000, workers: [1] })
    assert.deepStrictEqual(within.violations, [])
    assert.strictEqual(within.summary.maxRecoveryMs, 5)
    const never = check(h.records, final(2, "b", 2), { recoveryBoundMs: 1000, workers: [0, 1] })
    assert.deepStrictEqual(kinds(never.violations), ["no-recovery"])
    const late = check(h.records, final(2, "b", 2), { recoveryBoundMs: 2, workers: [1] })
    assert.deepStrictEqual(kinds(late.violations), ["no-recovery"])
  })

  it("times a worker still starting when the nemesis stopped from its first operation", () => {
    const h = legal()
    h.records.push({ t: "spawn", w: 2, life: 1, pid: 1, mono: 20 })
    h.records.push({ t: "nemesis-stop", mono: 35 })
    h.records.push({ t: "invoke", w: 2, id: "c", guarded: false, wall: 500, mono: 500 })
    h.records.push({ t: "acquired", w: 2, id: "c", token: "3", mono: 510 })
    const result = check(h.records, final(2, "b", 2), { recoveryBoundMs: 100, workers: [2] })
    assert.deepStrictEqual(result.violations, [])
    assert.strictEqual(result.summary.recovery[2], 10)
    const slow = check(h.records, final(2, "b", 2), { recoveryBoundMs: 5, workers: [2] })
    assert.deepStrictEqual(kinds(slow.violations), ["no-recovery"])
  })

  it("accepts a write of unknown outcome either way", () => {
    const h = history()
    h.op("a", 0).invoke(0).acquired(10, 1).read(11, "redis", 1, 0, "").write(20, "redis", 1, 1, "unknown").end(30)
    h.op("b", 1).invoke(0).acquired(40, 2).read(41, "redis", 2, 1, "a").write(50, "redis", 2, 2, "ok").end(60)
    assert.deepStrictEqual(check(h.records, final(2, "b", 2), options).violations, [])
    const h2 = history()
    h2.op("a", 0).invoke(0).acquired(10, 1).read(11, "redis", 1, 0, "").write(20, "redis", 1, 1, "unknown").end(30)
    h2.op("b", 1).invoke(0).acquired(40, 2).read(41, "redis", 2, 0, "").write(50, "redis", 2, 1, "ok").end(60)
    assert.deepStrictEqual(check(h2.records, final(1, "b", 2), options).violations, [])
  })
})

describe("chaos schedule", () => {
  const shape = { nemesisMs: 120_000, workers: 6, leaseMs: 2000 }
  it("is a function of the seed", () => {
    assert.deepStrictEqual(schedule({ seed: 42, ...shape }), schedule({ seed: 42, ...shape }))
    assert.notDeepEqual(schedule({ seed: 42, ...shape }), schedule({ seed: 43, ...shape }))
  })

  it("fits the nemesis' time, one fault after another", () => {
    const faults = schedule({ seed: 7, ...shape })
    assert.isAbove(faults.length, 10)
    for (let i = 1; i < faults.length; i++) {
      const previous = faults[i - 1]!
      assert.isAtLeast(faults[i]!.at, previous.at + previous.duration)
    }
    const last = faults.at(-1)!
    assert.isAtMost(last.at + last.duration, shape.nemesisMs)
  })
})
