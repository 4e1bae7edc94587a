/**
 * The local wait queue's state machine (src/internal/waiting/waiterQueue.ts), transition by
 * transition, with no backend: each test drives one of the phases the header lists.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Fiber, Option, TestClock } from "effect"
import type { HandedOver } from "../src/internal/waiting/waiterQueue.js"
import { makeWaiterQueue } from "../src/internal/waiting/waiterQueue.js"
import type { LockRequest } from "../src/LockBackend.js"

const settle = Effect.repeatN(Effect.yieldNow(), 20)
const request = (owner: string): LockRequest => ({ key: "k", owner, leaseMillis: 1_000, fencing: true })
const handedOver: HandedOver = { _tag: "HandedOver", fencingToken: 7n, startedAt: 0 }

const makeQueue = () => {
  const orphans: Array<string> = []
  const queue = makeWaiterQueue({
    onCount: () => {},
    onFirst: () => Effect.void,
    onLast: () => Effect.void,
    onOrphan: (r) => Effect.sync(() => void orphans.push(r.owner))
  })
  return { queue, orphans }
}

describe("waiter queue", () => {
  it.effect("a waiter promoted while a hand-over to it is in flight is told 'promoted', never to attempt", () =>
    Effect.gen(function*() {
      const { queue } = makeQueue()
      const first = yield* queue.register(request("w1"))
      const second = yield* queue.register(request("w2"))
      yield* first.ready
      queue.notify("k") // w1 is awake: a release hands over to the next one asleep
      const claim = queue.claimHandOver("k")
      assert.strictEqual(claim?.request.owner, "w2")
      const waiting = yield* Effect.fork(second.await(Infinity))
      yield* settle
      yield* first.leave(false) // w1 gives up: w2 becomes the head mid-hand-over
      yield* settle
      assert.deepStrictEqual(yield* Fiber.join(waiting), "promoted")
      const next = yield* Effect.fork(second.await(Infinity))
      yield* settle
      assert.isTrue(Option.isNone(yield* Fiber.poll(next)), "still waiting for the hand-over")
      assert.isTrue(claim!.grant(handedOver))
      assert.deepStrictEqual(yield* Fiber.join(next), handedOver)
    }))

  it.effect("a notification during a hand-over that fails is kept for that waiter", () =>
    Effect.gen(function*() {
      const { queue } = makeQueue()
      const waiter = yield* queue.register(request("w1"))
      const claim = queue.claimHandOver("k")!
      queue.notify("k")
      const waiting = yield* Effect.fork(waiter.await(Infinity))
      yield* settle
      assert.isTrue(Option.isNone(yield* Fiber.poll(waiting)))
      claim.cancel()
      assert.strictEqual(yield* Fiber.join(waiting), "released")
    }))

  it.effect("a waiter that leaves after the lock was handed to it, without taking it, gives it back", () =>
    Effect.gen(function*() {
      const { orphans, queue } = makeQueue()
      const waiter = yield* queue.register(request("w1"))
      const claim = queue.claimHandOver("k")!
      assert.isTrue(claim.grant(handedOver))
      yield* waiter.leave(false)
      assert.deepStrictEqual(orphans, ["w1"])
      const kept = yield* queue.register(request("w2"))
      assert.isTrue(queue.claimHandOver("k")!.grant(handedOver))
      yield* kept.leave(true)
      assert.deepStrictEqual(orphans, ["w1"], "a kept hand-over is not released")
    }))

  it.effect("a waiter that left before the grant refuses it: the releaser gives it back", () =>
    Effect.gen(function*() {
      const { orphans, queue } = makeQueue()
      const waiter = yield* queue.register(request("w1"))
      const claim = queue.claimHandOver("k")!
      yield* waiter.leave(false)
      assert.isFalse(claim.grant(handedOver))
      assert.deepStrictEqual(orphans, [], "the releaser releases it, not the queue")
    }))

  it.effect("a wait that runs out during a hand-over waits for it to settle", () =>
    Effect.gen(function*() {
      const { queue } = makeQueue()
      const waiter = yield* queue.register(request("w1"))
      const claim = queue.claimHandOver("k")!
      const waiting = yield* Effect.fork(waiter.await(100))
      yield* settle
      yield* TestClock.adjust(200)
      yield* settle
      assert.isTrue(Option.isNone(yield* Fiber.poll(waiting)), "overdue, but the hand-over is in flight")
      assert.isTrue(claim.grant(handedOver))
      assert.deepStrictEqual(yield* Fiber.join(waiting), handedOver)
    }))

  it.effect("a waiter about to attempt is not claimed; a notification wakes one waiter, not the herd", () =>
    Effect.gen(function*() {
      const { queue } = makeQueue()
      const first = yield* queue.register(request("w1"))
      yield* queue.register(request("w2"))
      assert.isTrue(yield* first.ready, "the opener attempts right after subscribing")
      assert.isUndefined(queue.claimHandOver("k"), "w1 is attempting: nobody is handed the lock")
      queue.notify("k")
      queue.notify("k")
      const woken = yield* Effect.fork(first.await(Infinity))
      assert.strictEqual(yield* Fiber.join(woken), "released")
    }))
})
