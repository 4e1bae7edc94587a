/**
 * The guarded program: it runs in a fiber of its own that a loss (or the release) of the hold
 * interrupts, so that the caller gets a `LockLostError` instead of being interrupted itself.
 */
import type { FiberRefs } from "effect"
import { Effect, Exit, Fiber, FiberId, FiberRef, Runtime } from "effect"
import type { LockLostError } from "../../LockError.js"
import type { Restore } from "../restore.js"
import type { Hold } from "./hold.js"
import { checkHeld, endedBy } from "./hold.js"
import type { Region } from "./region.js"
import { currentRegion } from "./region.js"

/**
 * Run `effect` in a fiber of its own that a loss of the hold interrupts; the result is then a
 * `LockLostError`. Must be called inside `uninterruptibleMask`, with its `restore`. Fibers the
 * effect forks are that fiber's children and end with it. `region`, when given, is installed as
 * the fiber's region.
 *
 * The fiber's first step checks the hold: a process that was paused past its deadline learns it
 * there, before the effect takes a step, even if the watchdog has not run yet; a lease used after
 * its scope released it runs nothing.
 */
export const runGuarded = <A, E, R>(
  hold: Hold,
  effect: Effect.Effect<A, E, R>,
  restore: Restore,
  region?: Region | undefined
): Effect.Effect<A, E | LockLostError, R> =>
  Effect.suspend(() => {
    // Traced: the program's own spans are children of the hold's span.
    const program = hold.span === undefined ? effect : Effect.withParentSpan(effect, hold.span)
    // The child's FiberRefs once its region is set: if they are the same object when it ends, the
    // program changed no FiberRef, and there is nothing for the caller to inherit.
    let initialRefs: FiberRefs.FiberRefs | undefined
    const started = Effect.withFiberRuntime<A, E | LockLostError, R>((child) => {
      initialRefs = child.getFiberRefs()
      return Effect.zipRight(checkHeld(hold), restore(program))
    })
    const child = region === undefined ? started : Effect.zipRight(FiberRef.set(currentRegion, region), started)
    // Started at once on this thread (no scheduler hop before the program's first step); it is
    // not a child of the caller's fiber, so every way out below awaits or interrupts it.
    const start = Effect.map(Effect.runtime<R>(), (runtime) => Runtime.runFork(runtime)(child, { immediate: true }))
    return Effect.flatMap(start, (fiber) => {
      ;(hold.guarded ??= new Set()).add(fiber as Fiber.RuntimeFiber<unknown, unknown>)
      if (hold.state._tag !== "Held") fiber.unsafeInterruptAsFork(FiberId.none)
      return Effect.flatMap(
        Effect.exit(restore(Fiber.await(fiber))),
        (awaited): Effect.Effect<A, E | LockLostError> => {
          if (Exit.isFailure(awaited)) {
            // The caller was interrupted: stop the program first, then pass the interruption on.
            return Effect.zipRight(
              Effect.ensuring(Fiber.interrupt(fiber), Effect.sync(() => hold.guarded?.delete(fiber as never))),
              Effect.failCause(awaited.cause)
            )
          }
          hold.guarded?.delete(fiber as Fiber.RuntimeFiber<unknown, unknown>)
          const exit = awaited.value
          const ended = Exit.isFailure(exit) ? endedBy(hold, exit.cause) : undefined
          if (ended !== undefined) return Effect.fail(ended)
          return fiber.getFiberRefs() === initialRefs ? exit : Effect.zipRight(Fiber.inheritAll(fiber), exit)
        }
      )
    })
  })

/** `runGuarded` for callers outside a mask (`Lease.guard`). */
export const guard = <A, E, R>(hold: Hold, effect: Effect.Effect<A, E, R>): Effect.Effect<A, E | LockLostError, R> =>
  Effect.uninterruptibleMask((restore) => runGuarded(hold, effect, restore))
