/**
 * Asking every node at once and deciding as soon as the answers in hand settle the question: a
 * quorum reached, or out of reach. A paused node (connected, answering nothing) then costs nothing
 * while the others answer; its call goes on in the backend's scope until its command budget ends.
 *
 * The calls run in the scope given (the backend's), never in the caller's fiber, so a caller that
 * stops waiting leaves them to finish, and `interruptPending` stops the ones whose outcome no
 * longer matters (an interrupted acquire in flight releases what it may have taken).
 */
import type { Scope } from "effect"
import { Deferred, Effect, Either, Fiber } from "effect"
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
export const gather = <A>(
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
