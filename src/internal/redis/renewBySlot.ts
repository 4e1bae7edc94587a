/**
 * Renewals on a Redis Cluster: a script's keys must all be in one slot, so the renewals that came
 * due together go out as one script per slot, concurrently (each to its slot's master). A slot
 * whose call fails fails only its own renewals, as one node of several being down should.
 */
import { Effect } from "effect"
import type { RenewOutcome, RenewResult } from "../../LockBackend.js"
import type { LockBackendError } from "../../LockError.js"

export const renewBySlot = <R>(
  requests: ReadonlyArray<R>,
  slotOf: (request: R) => number,
  renew: (requests: ReadonlyArray<R>) => Effect.Effect<ReadonlyArray<RenewResult>, LockBackendError>
): Effect.Effect<ReadonlyArray<RenewOutcome>> =>
  Effect.suspend(() => {
    const groups = new Map<number, { indexes: Array<number>; requests: Array<R> }>()
    requests.forEach((request, index) => {
      const slot = slotOf(request)
      const group = groups.get(slot) ?? { indexes: [], requests: [] }
      group.indexes.push(index)
      group.requests.push(request)
      groups.set(slot, group)
    })
    const outcomes: Array<RenewOutcome> = new Array(requests.length)
    return Effect.as(
      Effect.forEach(groups.values(), (group) =>
        Effect.match(renew(group.requests), {
          onFailure: (error) => {
            for (const i of group.indexes) outcomes[i] = error
          },
          onSuccess: (results) => {
            results.forEach((result, n) => {
              outcomes[group.indexes[n] ?? n] = result
            })
          }
        }), { concurrency: "unbounded", discard: true }),
      outcomes
    )
  })
