/**
 * Stopping the holds of a backend whose scope is closing (a `ManagedRuntime.dispose()`, the end of
 * `NodeRuntime.runMain`): every program that runs guarded by a hold is interrupted, so its
 * `withLock` releases the lock on its way out; a hold taken with `Lock.acquire` into a scope that
 * outlives the backend is released here. The backend then waits for the releases to be done.
 */
import { Effect, FiberId } from "effect"
import type { Hold } from "./hold.js"
import { releaseHold } from "./hold.js"

export const stopHolds = (holds: ReadonlySet<Hold>): Effect.Effect<void> =>
  Effect.forEach(Array.from(holds), (hold) => {
    if (hold.guarded !== undefined) { for (const fiber of hold.guarded) fiber.unsafeInterruptAsFork(FiberId.none) }
    return hold.scoped ? releaseHold(hold) : Effect.void
  }, { discard: true, concurrency: "unbounded" })
