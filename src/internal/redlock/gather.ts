/**
 * Asking every node at once and deciding as soon as the answers in hand settle the question: a
 * quorum reached, or out of reach. A paused node (connected, answering nothing) then costs nothing
 * while the others answer; its call goes on until its command budget ends.
 *
 * `gather` sends commands by callbacks (`Commands.start`): one `Effect.async` for the whole
 * fan-out, no fiber per node. The calls are the backend's, not the caller's: a caller that stops
 * waiting leaves them to finish, `interruptPending` stops the ones whose outcome no longer matters
 * (an acquire in flight releases what it may have taken), and so does closing the backend
 * (`PendingCalls`). `gatherEffects` does the same for effects (the subscriptions), each forked in
 * the backend's scope.
 */
import { Deferred, Effect, Either, Fiber, Scope } from "effect"
import type { LockBackendError } from "../../LockError.js"

/** One node's answer: its value, its error, or `undefined` while it has not answered. */
export type Answer<A> = Either.Either<A, LockBackendError> | undefined

export interface Gathered<A> {
  /** The answers at the moment of the decision (a copy: later answers do not change it). */
  readonly answers: ReadonlyArray<Answer<A>>
  /** Interrupt the calls that have not answered yet. */
  readonly interruptPending: Effect.Effect<void>
}

/**
 * Run `calls` concurrently in `scope` and return once `settled(answers)` holds or every call has
 * answered.
 */
export const gatherEffects = <A>(
  scope: Scope.Scope,
  calls: ReadonlyArray<Effect.Effect<A, LockBackendError>>,
  settled: (answers: ReadonlyArray<Answer<A>>) => boolean
): Effect.Effect<Gathered<A>> =>
  Effect.gen(function*() {
    const answers: Array<Answer<A>> = calls.map(() => undefined)
    const decided = yield* Deferred.make<ReadonlyArray<Answer<A>>>()
    let remaining = calls.length
    const fibers = yield* Effect.forEach(calls, (call, index) =>
      // Interruptible although the caller may not be (an acquire attempt is not): `interruptPending`
      // must be able to stop a call to a paused node.
      Effect.forkIn(
        Effect.flatMap(Effect.either(Effect.interruptible(call)), (answer) =>
          Effect.suspend(() => {
            answers[index] = answer
            remaining--
            return remaining === 0 || settled(answers)
              ? Deferred.succeed(decided, answers.slice())
              : Effect.void
          })),
        scope
      ))
    if (calls.length === 0) yield* Deferred.succeed(decided, [])
    const snapshot = yield* Deferred.await(decided)
    return {
      answers: snapshot,
      interruptPending: Effect.asVoid(Fiber.interruptAll(fibers))
    }
  })

/** Starts one call; `done` gets its answer. Returns what stops waiting for it, if anything does. */
export type Start<A> = (done: (answer: Either.Either<A, LockBackendError>) => void) => (() => void) | undefined

/** The fan-outs still waiting for answers, stopped when the backend closes. */
export interface PendingCalls {
  readonly add: (stop: () => void) => void
  readonly delete: (stop: () => void) => void
}

/** A set of fan-outs that `scope` stops (as it once interrupted their fibers) when it closes. */
export const makePendingCalls = (scope: Scope.Scope): Effect.Effect<PendingCalls> =>
  Effect.gen(function*() {
    const pending = new Set<() => void>()
    yield* Scope.addFinalizer(
      scope,
      Effect.sync(() => {
        for (const stop of Array.from(pending)) stop()
      })
    )
    return pending
  })

/**
 * Start every call at once (none waits for another) and return once `settled(answers)` holds or
 * every call has answered.
 */
export const gather = <A>(
  pending: PendingCalls,
  starts: ReadonlyArray<Start<A>>,
  settled: (answers: ReadonlyArray<Answer<A>>) => boolean
): Effect.Effect<Gathered<A>> =>
  Effect.async<Gathered<A>>((resume) => {
    const total = starts.length
    const answers: Array<Answer<A>> = new Array(total).fill(undefined)
    const stops: Array<(() => void) | undefined> = new Array(total).fill(undefined)
    let remaining = total
    let decided = false
    const decide = () => {
      decided = true
      resume(Effect.succeed({ answers: answers.slice(), interruptPending }))
    }
    // After the decision (`interruptPending`), or when the backend closes: a caller still waiting
    // then gets the answers in hand (the stopped calls' are missing).
    const stopPending = () => {
      pending.delete(stopPending)
      remaining = 0
      for (let i = 0; i < total; i++) {
        const stop = stops[i]
        stops[i] = undefined
        if (answers[i] === undefined) stop?.()
      }
      if (!decided) decide()
    }
    const interruptPending = Effect.sync(stopPending)
    pending.add(stopPending)
    starts.forEach((start, index) => {
      const stop = start((answer) => {
        if (remaining === 0 || answers[index] !== undefined) return
        answers[index] = answer
        stops[index] = undefined
        remaining--
        if (remaining === 0) pending.delete(stopPending)
        if (!decided && (remaining === 0 || settled(answers))) decide()
      })
      if (answers[index] === undefined) stops[index] = stop
    })
    if (total === 0) {
      pending.delete(stopPending)
      decide()
    }
  })

/** The values among the answers, each with its node's index. */
export const valuesOf = <A>(answers: ReadonlyArray<Answer<A>>): Array<readonly [number, A]> => {
  const values: Array<readonly [number, A]> = []
  answers.forEach((answer, index) => {
    if (answer !== undefined && Either.isRight(answer)) values.push([index, answer.right])
  })
  return values
}

/** The errors among the answers. */
export const errorsOf = <A>(answers: ReadonlyArray<Answer<A>>): Array<LockBackendError> => {
  const errors: Array<LockBackendError> = []
  for (const answer of answers) if (answer !== undefined && Either.isLeft(answer)) errors.push(answer.left)
  return errors
}
