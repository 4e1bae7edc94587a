/**
 * Wraps the memory backend's primitives to count calls and to inject faults (failing renewals or
 * releases, slow releases, lost notifications), then builds the service around them with
 * `LockBackend.make`, as every backend is built. The wrapped primitives still do the work; nothing
 * here imitates Redis.
 */
import type { Scope } from "effect"
import { Effect, Layer, Queue } from "effect"
import type { Notification } from "../../src/LockBackend.js"
import { LockBackend } from "../../src/LockBackend.js"
import { LockBackendError } from "../../src/LockError.js"
import * as MemoryBackend from "../../src/MemoryBackend.js"

export interface Instrumented {
  readonly backend: MemoryBackend.MemoryBackendShape
  /** The memory primitives underneath, uncounted: for a foreign owner that the counts leave out. */
  readonly inner: MemoryBackend.MemoryPrimitives
  readonly calls: { tryAcquire: number; renew: number; release: number; subscribe: number }
  /** How many `renew` calls the backend got (each may carry several renewals). */
  readonly renewCalls: { count: number }
  /** Owners whose renewals fail (as if their process could not reach the backend). */
  readonly failRenewals: Set<string>
  /** When true, every renewal fails. */
  failAllRenewals: boolean
  /** When true, releases fail. */
  failReleases: boolean
  /**
   * Releases and hand-overs take this long to answer (as a slow network would), in Clock
   * milliseconds: the backend acts halfway through.
   */
  releaseDelayMillis: number
  /** Release notifications never reach waiters (as with pub/sub down). */
  dropNotifications: boolean
  /** Renewals seen, by key. */
  readonly renewalsByKey: Map<string, number>
  readonly layer: Layer.Layer<LockBackend>
}

const fault = (operation: "renew" | "release", key: string) =>
  new LockBackendError({ backend: "memory", operation, key, cause: new Error("injected fault") })

/** A fresh instrumented memory backend, in the current scope. */
export const makeInstrumented: Effect.Effect<Instrumented, never, Scope.Scope> = Effect.gen(function*() {
  const inner = yield* MemoryBackend.makePrimitives
  const self = {
    calls: { tryAcquire: 0, renew: 0, release: 0, subscribe: 0 },
    renewCalls: { count: 0 },
    failRenewals: new Set<string>(),
    failAllRenewals: false,
    failReleases: false,
    releaseDelayMillis: 0,
    dropNotifications: false,
    renewalsByKey: new Map<string, number>()
  }
  // Half the delay before the backend acts, half before its reply arrives, as a network would.
  const delayed = <A, E>(effect: Effect.Effect<A, E>) =>
    self.releaseDelayMillis > 0
      ? Effect.zipLeft(
        Effect.delay(effect, Math.floor(self.releaseDelayMillis / 2)),
        Effect.sleep(Math.ceil(self.releaseDelayMillis / 2))
      )
      : effect
  const releasing = <A>(key: string, release: Effect.Effect<A, LockBackendError>) =>
    Effect.suspend(() => {
      self.calls.release++
      return delayed(self.failReleases ? Effect.fail(fault("release", key)) : release)
    })
  // The notifications pass through, unless they are being dropped.
  const notifications = yield* Queue.unbounded<Notification>()
  yield* Effect.forkScoped(Effect.forever(Effect.flatMap(
    Queue.takeBetween(inner.notifications, 1, Number.POSITIVE_INFINITY),
    (batch) => self.dropNotifications ? Effect.void : Queue.offerAll(notifications, batch)
  )))
  const wrapped: MemoryBackend.MemoryPrimitives = {
    ...inner,
    tryAcquire: (request) => Effect.suspend(() => (self.calls.tryAcquire++, inner.tryAcquire(request))),
    renew: (requests) =>
      Effect.suspend(() => {
        self.renewCalls.count++
        self.calls.renew += requests.length
        for (const request of requests) {
          self.renewalsByKey.set(request.key, (self.renewalsByKey.get(request.key) ?? 0) + 1)
        }
        if (self.failAllRenewals) {
          return Effect.fail(fault("renew", requests[0]!.key))
        }
        const failing = (owner: string) => self.failRenewals.has(owner)
        return Effect.map(inner.renew(requests.filter((r) => !failing(r.owner))), (results) => {
          let next = 0
          return requests.map((r) => failing(r.owner) ? fault("renew", r.key) : results[next++]!)
        })
      }),
    release: (key, owner) => releasing(key, inner.release(key, owner)),
    handOver: (key, from, to) => releasing(key, inner.handOver!(key, from, to)),
    subscribe: (key) => Effect.suspend(() => (self.calls.subscribe++, inner.subscribe(key))),
    notifications
  }
  const backend = yield* MemoryBackend.fromPrimitives(wrapped)
  return Object.assign(self, { backend, inner, layer: Layer.succeed(LockBackend, backend) })
})
