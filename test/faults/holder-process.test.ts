/**
 * Faults of the holder's process: paused past its lease (SIGSTOP ... SIGCONT) and killed
 * (`kill -9`). Holder and contender are separate OS processes (test/faults/worker.ts), each with
 * its own Redis backend; the test process only drives them and watches the server.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { redisServer, skipRedis } from "../support/redisServer.js"
import {
  adminClient,
  cmd,
  eventually,
  faultScenario,
  fromHr,
  hrMillis,
  keyspace,
  measured,
  numsub,
  startWorker
} from "./support.js"

const LEASE = 1_500
const channelOf = (key: string) => `redisson_lock__channel:{${key}}`
const tokenKeyOf = (key: string) => `redisson_lock_token:{${key}}`

/** A server of its own, an admin connection, and two worker processes: a holder and a contender. */
const holderAndContender = Effect.gen(function*() {
  const server = yield* redisServer()
  const redis = yield* adminClient(server.url)
  const [holder, contender] = yield* Effect.all(
    [startWorker(server.url, "holder"), startWorker(server.url, "contender")],
    { concurrency: "unbounded" }
  )
  return { server, redis, holder, contender }
})

describe.skipIf(skipRedis(true))("faults: the holder's process", () => {
  it.scopedLive(
    "paused past its lease (SIGSTOP): another process gets the lock after the lease; the resumed holder runs no guarded step and its stale write is refused",
    () =>
      faultScenario(Effect.gen(function*() {
        const key = "ledger"
        const { redis, holder, contender } = yield* holderAndContender

        yield* holder.send({ op: "acquire", key, lease: LEASE })
        const first = BigInt((yield* holder.take("acquired")).token as string)
        // While held, guarded steps run and the fenced resource takes the holder's writes.
        yield* holder.send({ op: "step" })
        assert.strictEqual((yield* holder.take("step")).ran, 1)
        yield* holder.send({ op: "step" })
        assert.strictEqual((yield* holder.take("step")).ran, 2)
        yield* holder.send({ op: "write", value: "from the first holder" })
        yield* holder.take("written")
        // The holder's work from now on: a guarded step every 10 ms.
        yield* holder.send({ op: "loop", every: 10 })
        yield* holder.take("looping")

        // The contender waits; with a 60 s retry only a release or the lease's end lets it in.
        yield* contender.send({ op: "acquire", key, lease: LEASE, retry: 60_000 })
        yield* eventually(Effect.map(numsub(redis, channelOf(key)), (n) => n === 1), 10_000, "the contender to wait")

        holder.signal("SIGSTOP")
        const stoppedAt = hrMillis()
        // Whatever the holder sent before it stopped has reached the server by now.
        yield* Effect.sleep(50)
        const asked = hrMillis()
        const pttl = yield* cmd<number>(redis, "PTTL", key)
        assert.isAbove(pttl, 0, "the stopped holder's lease is still running")

        const got = yield* contender.take("acquired", 10_000)
        const second = BigInt(got.token as string)
        const contenderOwner = got.owner as string
        measured("SIGSTOP holder: contender in after the lease end", fromHr(got.at) - (asked + pttl))
        assert.isAtLeast(fromHr(got.at), asked + pttl - 2, "the contender got in only once the holder's lease ended")
        assert.isTrue(second > first, `token ${second} after ${first}`)
        yield* contender.send({ op: "write", value: "from the second holder" })
        yield* contender.take("written")

        // Keep the holder stopped for longer than its whole lease.
        yield* Effect.sleep(Math.max(0, stoppedAt + LEASE + 300 - hrMillis()))
        // Queued in the pipe while it is stopped: the first things it does when it continues.
        yield* holder.send({ op: "step" })
        yield* holder.send({ op: "write", value: "stale write from the first holder" })
        const resumedAt = hrMillis()
        holder.signal("SIGCONT")

        // The loop's next step is refused before it runs: the guard checks the local deadline
        // (the watchdog's timer may not have fired yet).
        const loopRefused = yield* holder.take("loop-refused")
        assert.strictEqual(loopRefused.tag, "LockLostError", String(loopRefused.message))
        // "expired"; "renewal-failed" if a renewal happened to be in flight when it stopped.
        assert.include(["expired", "renewal-failed"], loopRefused.reason, "lost: paused past the local deadline")
        yield* holder.send({ op: "report" })
        const steps = (yield* holder.take("report")).steps as ReadonlyArray<readonly [string, string]>
        assert.isAtLeast(steps.filter(([entered]) => fromHr(entered) < stoppedAt).length, 1, "the loop ran while held")
        // A step entered before the stop may have been admitted just before it (check, then act);
        // no step entered after the resume may run.
        const afterResume = steps.filter(([entered]) => fromHr(entered) > resumedAt)
        assert.deepStrictEqual(afterResume, [], "no guarded step entered after the resume ran")

        // The step requested while it was stopped is refused as well.
        const refused = yield* holder.take("refused")
        assert.strictEqual(refused.tag, "LockLostError", String(refused.message))
        assert.strictEqual(refused.ran, 2, "it did not run")

        const rejected = yield* holder.take("rejected")
        assert.strictEqual(rejected.tag, "FencingTokenRejectedError", String(rejected.message))
        assert.strictEqual(rejected.highest, String(second))
        assert.strictEqual(yield* cmd(redis, "GET", "data"), "from the second holder")
        assert.strictEqual(yield* cmd(redis, "GET", "fence:{data}"), String(second))

        assert.strictEqual((yield* holder.take("lost")).reason, loopRefused.reason, "lease.lost reports the same loss")
        // The lost holder's clean-up is owner-checked: the contender still holds the lock.
        yield* holder.send({ op: "release" })
        yield* holder.take("released")
        yield* holder.send({ op: "inspect", key })
        assert.deepStrictEqual((yield* holder.take("inspected")).holders, [contenderOwner])
        yield* contender.send({ op: "step" })
        assert.strictEqual((yield* contender.take("step")).ran, 1, "the contender's lease is intact")

        yield* contender.send({ op: "release" })
        yield* contender.take("released")
        const left = ["data", "fence:{data}", tokenKeyOf(key)].sort()
        yield* eventually(Effect.map(keyspace(redis), (keys) => keys.join() === left.join()), 5_000, `only ${left}`)
      }))
  )

  it.scopedLive("killed (kill -9): another process gets the lock no earlier than the lease ends, no later than lease + 1 s", () =>
    faultScenario(Effect.gen(function*() {
      const key = "nightly-job"
      const { redis, holder, contender } = yield* holderAndContender

      yield* holder.send({ op: "acquire", key, lease: LEASE })
      const first = BigInt((yield* holder.take("acquired")).token as string)
      yield* contender.send({ op: "acquire", key, lease: LEASE, retry: 60_000 })
      yield* eventually(Effect.map(numsub(redis, channelOf(key)), (n) => n === 1), 10_000, "the contender to wait")
      // Past the holder's first renewal: the contender's idea of the holder's lease is stale.
      yield* Effect.sleep(LEASE / 2)

      holder.signal("SIGKILL")
      yield* Effect.promise(() => holder.exited)
      yield* Effect.sleep(50)
      const asked = hrMillis()
      const pttl = yield* cmd<number>(redis, "PTTL", key)
      const answered = hrMillis()
      assert.isAbove(pttl, 0, "the dead holder's lock stays until its lease ends")

      const got = yield* contender.take("acquired", 10_000)
      const gotAt = fromHr(got.at)
      measured("kill -9: contender in after the lease end", gotAt - (asked + pttl))
      assert.isAtLeast(gotAt, asked + pttl - 2, "no earlier than the lease ends")
      assert.isAtMost(gotAt, answered + pttl + 1 + 1_000, "no later than the lease + 1 s")
      assert.isTrue(BigInt(got.token as string) > first)

      yield* contender.send({ op: "release" })
      yield* contender.take("released")
      yield* eventually(
        Effect.map(keyspace(redis), (keys) => keys.join() === tokenKeyOf(key)),
        5_000,
        "only the counter"
      )
    })))
})
