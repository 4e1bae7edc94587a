/**
 * The guarded program: it runs in a fiber of its own that a loss (or the release) of the hold
 * interrupts, so that the caller gets a `LockLostError` instead of being interrupted itself.
 */
import type { Context } from "effect"
import { Effect, Exit, Fiber, FiberId, FiberRef, FiberRefs, Runtime, RuntimeFlags } from "effect"
import type { LockLostError } from "../../LockError.js"
import type { Restore } from "../restore.js"
import { fiberNowMillis } from "../time.js"
import type { Hold } from "./hold.js"
import { checkHeldAt, endedBy } from "./hold.js"
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
  // The fast version of this shape (it runs once per withLock): the child is made from the caller's
  // fiber directly, with its region already in its FiberRefs and, when the caller was
  // interruptible, the interruptibility `restore` would give it; the hold is checked as it is
  // forked, so the program is its only step.
  Effect.withFiberRuntime<A, E | LockLostError, R>((parent, status) => {
    // Traced: the program's own spans are children of the hold's span.
    const program = hold.span === undefined ? effect : Effect.withParentSpan(effect, hold.span)
    const restored = restore === Effect.interruptible
    // The child's FiberRefs as it starts (its region set): if they hold the same values when it
    // ends, the program changed no FiberRef, and there is nothing for the caller to inherit.
    let initialRefs: FiberRefs.FiberRefs | undefined
    // Checked as the child starts (it starts right here, on this thread): a process that was paused
    // past its deadline learns it before the program takes a step; a released hold runs nothing.
    const ended = checkHeldAt(hold, fiberNowMillis(parent))
    const started: Effect.Effect<A, E | LockLostError, R> = ended ?? (restored ? program : restore(program))
    const runtime = Runtime.make({
      context: parent.currentContext as Context.Context<R>,
      runtimeFlags: restored
        ? RuntimeFlags.enable(status.runtimeFlags, RuntimeFlags.Interruption)
        : status.runtimeFlags,
      fiberRefs: parent.getFiberRefs()
    })
    // Started at once on this thread (no scheduler hop before the program's first step); it is
    // not a child of the caller's fiber, so every way out below awaits or interrupts it.
    const previous = hold.starting
    const fiber = Runtime.runFork(runtime)(started, {
      immediate: true,
      updateRefs: (refs, fiberId) => {
        hold.starting = fiberId
        return initialRefs = region === undefined
          ? refs
          : FiberRefs.updateAs(refs, { fiberId, fiberRef: currentRegion, value: region })
      }
    })
    hold.starting = previous
    // The program's result, once the fiber is done: a loss that interrupted it becomes the hold's
    // `LockLostError`, and FiberRefs it set pass to the caller.
    const settle = (exit: Exit.Exit<A, E | LockLostError>): Effect.Effect<A, E | LockLostError> => {
      const ended = Exit.isFailure(exit) ? endedBy(hold, exit.cause) : undefined
      if (ended !== undefined) return Effect.fail(ended)
      return initialRefs !== undefined && unchanged(initialRefs, fiber.getFiberRefs())
        ? exit
        : Effect.zipRight(Fiber.inheritAll(fiber), exit)
    }
    // A program that finished within its first run (short, synchronous work) is not awaited: that
    // would cost a trip through the scheduler for a result that is already there.
    const done = fiber.unsafePoll()
    if (done !== null) return settle(done)
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
        return settle(awaited.value)
      }
    )
  })

/**
 * Whether the program changed none of its fiber's FiberRefs, from two snapshots of them.
 * `getFiberRefs` returns a new object on every call (it records the runtime flags first), so
 * identity says nothing; but a ref nobody set keeps its very stack, so comparing the stacks entry by
 * entry is exact, and far cheaper than `Fiber.inheritAll` (which walks and merges every ref). The
 * runtime flags may differ in what `inheritAll` never passes on: interruptibility, and the wind-down
 * that every fiber enters as it ends. Effect's `FiberRefs` keeps its map as `locals`; should that
 * ever change, this says "changed" and the caller inherits, as `Fiber.join` always does.
 */
const unchanged = (before: FiberRefs.FiberRefs, after: FiberRefs.FiberRefs): boolean => {
  const a = (before as unknown as { readonly locals?: unknown }).locals
  const b = (after as unknown as { readonly locals?: unknown }).locals
  if (!(a instanceof Map) || !(b instanceof Map) || a.size !== b.size) return false
  for (const [ref, stack] of b) {
    if (a.get(ref) === stack) continue
    if (ref !== FiberRef.currentRuntimeFlags) return false
    const flagsBefore = FiberRefs.getOrDefault(before, FiberRef.currentRuntimeFlags)
    const flagsAfter = FiberRefs.getOrDefault(after, FiberRef.currentRuntimeFlags)
    if (((flagsBefore ^ flagsAfter) & ~(RuntimeFlags.Interruption | RuntimeFlags.WindDown)) !== 0) return false
  }
  return true
}

/** `runGuarded` for callers outside a mask (`Lease.guard`). */
export const guard = <A, E, R>(hold: Hold, effect: Effect.Effect<A, E, R>): Effect.Effect<A, E | LockLostError, R> =>
  Effect.uninterruptibleMask((restore) => runGuarded(hold, effect, restore))
