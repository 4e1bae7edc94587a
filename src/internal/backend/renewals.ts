/**
 * The renewal scheduler, one per backend: renewals wait in buckets by the Clock instant they are
 * due, and each bucket has one timer fiber in the backend's scope that sends all of its renewals
 * together, 100 to a `primitives.renew` call (as Redisson 4.7's `LockTask` renews up to 100 locks
 * in one script). Registering before the instant, rather than gathering whoever wakes at it, makes
 * the batching exact on any clock, `TestClock` included. The watchdogs' renewal grid puts holds
 * taken at about the same time into the same bucket.
 */
import type { Scope } from "effect"
import { Cause, Deferred, Effect, Exit, FiberId, FiberSet, Option } from "effect"
import type { LockPrimitives, LockRequest, RenewOutcome } from "../../LockBackend.js"
import { LockBackendError } from "../../LockError.js"
import { nowMillis, sleepMillis, wholeMillis } from "../time.js"

/**
 * How one scheduled renewal went: renewed (the call started at `startedAt`), lost, failed (retry
 * while there is time), or overdue: the hold's local deadline passed before a renewal could be
 * confirmed (`attempted`: a call was in flight, and got no reply in time).
 */
export type Renewal =
  | { readonly _tag: "Renewed"; readonly startedAt: number }
  | { readonly _tag: "Lost"; readonly reason: "stolen" | "expired" }
  | { readonly _tag: "Failed"; readonly error: LockBackendError }
  | { readonly _tag: "Overdue"; readonly attempted: boolean }

/**
 * Renew `request` at Clock time `at`, with every renewal due at the same instant, given the hold's
 * local `deadline`. Interrupting the caller withdraws the renewal if it was not sent yet.
 */
export type RenewAt = (request: LockRequest, at: number, deadline: number) => Effect.Effect<Renewal>

/** The most renewals sent in one `primitives.renew` call. */
export const MAX_RENEW_BATCH = 100

interface Member {
  readonly request: LockRequest
  readonly deadline: number
  readonly done: Deferred.Deferred<Renewal>
}

const notSent: Renewal = { _tag: "Overdue", attempted: false }
const unanswered: Renewal = { _tag: "Overdue", attempted: true }

export const makeRenewals = (primitives: LockPrimitives): Effect.Effect<RenewAt, never, Scope.Scope> =>
  Effect.gen(function*() {
    const timers = yield* FiberSet.make()
    const buckets = new Map<number, Set<Member>>()

    const settle = (member: Member, renewal: Renewal) => Deferred.unsafeDone(member.done, Exit.succeed(renewal))
    const failure = (member: Member, cause: unknown) =>
      new LockBackendError({ backend: primitives.name, operation: "renew", key: member.request.key, cause })
    const outcomeOf = (member: Member, outcome: RenewOutcome | undefined, startedAt: number): Renewal =>
      outcome === undefined
        ? { _tag: "Failed", error: failure(member, new Error("the backend returned no outcome for this renewal")) }
        : outcome._tag === "LockBackendError"
        ? { _tag: "Failed", error: outcome }
        : outcome._tag === "Renewed"
        ? { _tag: "Renewed", startedAt }
        : outcome

    const send = (batch: ReadonlyArray<Member>) =>
      Effect.gen(function*() {
        const startedAt = yield* nowMillis
        const live = batch.filter((member) => member.deadline > startedAt || (settle(member, notSent), false))
        if (live.length === 0) return
        // No reply is of use after the earliest deadline in the batch: that hold is lost by then.
        const budget = wholeMillis(Math.min(...live.map((member) => member.deadline)) - startedAt)
        const exit = yield* Effect.exit(Effect.timeoutOption(primitives.renew(live.map((m) => m.request)), budget))
        const now = yield* nowMillis
        live.forEach((member, i) => {
          if (Exit.isFailure(exit)) {
            const error = Cause.failureOption(exit.cause)
            settle(member, {
              _tag: "Failed",
              error: Option.isSome(error) ? error.value : failure(member, Cause.squash(exit.cause))
            })
          } else if (Option.isNone(exit.value)) {
            settle(
              member,
              member.deadline <= now
                ? unanswered
                : { _tag: "Failed", error: failure(member, new Error("no reply before the earliest deadline of its batch")) }
            )
          } else {
            settle(member, outcomeOf(member, exit.value.value[i], startedAt))
          }
        })
      })

    const fire = (at: number, bucket: Set<Member>) =>
      Effect.zipRight(
        Effect.flatMap(nowMillis, (now) => sleepMillis(at - now)),
        Effect.suspend(() => {
          if (buckets.get(at) === bucket) buckets.delete(at)
          const batch = Array.from(bucket)
          const sends: Array<Effect.Effect<void>> = []
          for (let i = 0; i < batch.length; i += MAX_RENEW_BATCH) sends.push(send(batch.slice(i, i + MAX_RENEW_BATCH)))
          return Effect.all(sends, { concurrency: "unbounded", discard: true })
        })
      )

    return (request, at, deadline) =>
      Effect.uninterruptibleMask((restore) =>
        Effect.suspend(() => {
          const member: Member = { request, deadline, done: Deferred.unsafeMake<Renewal>(FiberId.none) }
          let bucket = buckets.get(at)
          const opened = bucket === undefined
          if (bucket === undefined) {
            bucket = new Set()
            buckets.set(at, bucket)
          }
          bucket.add(member)
          const joined = bucket
          const withdraw = Effect.sync(() => {
            joined.delete(member)
            if (joined.size === 0 && buckets.get(at) === joined) buckets.delete(at)
          })
          return Effect.zipRight(
            opened ? Effect.asVoid(FiberSet.run(timers, Effect.interruptible(fire(at, joined)))) : Effect.void,
            Effect.onInterrupt(restore(Deferred.await(member.done)), () => withdraw)
          )
        })
      )
  })
