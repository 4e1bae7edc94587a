/**
 * Wraps a real backend to count calls and to inject faults (failing renewals or releases). The
 * wrapped backend still does the work; nothing here imitates Redis.
 */
import { Clock, Effect, Layer } from "effect"
import type { LockBackendShape } from "../../src/LockBackend.js"
import { LockBackend } from "../../src/LockBackend.js"
import { LockBackendError } from "../../src/LockError.js"
import * as MemoryBackend from "../../src/MemoryBackend.js"

export interface Instrumented {
  readonly backend: MemoryBackend.MemoryBackendShape
  readonly calls: { tryAcquire: number; renew: number; release: number; subscribe: number }
  /** Owners whose renewals fail (as if their process could not reach the backend). */
  readonly failRenewals: Set<string>
  /** When true, every renewal fails. */
  failAllRenewals: boolean
  /** When true, releases fail. */
  failReleases: boolean
  /** Releases take this long to answer (as a slow network would), in Clock milliseconds. */
  releaseDelayMillis: number
  /** Release notifications never reach waiters (as with pub/sub down). */
  dropNotifications: boolean
  readonly layer: Layer.Layer<LockBackend>
}

const fault = (operation: string, key: string) =>
  new LockBackendError({ backend: "memory", operation, key, cause: new Error("injected fault") })

export const makeInstrumented: Effect.Effect<Instrumented> = Effect.map(MemoryBackend.make, (inner) => {
  const self: Instrumented = {
    backend: inner,
    calls: { tryAcquire: 0, renew: 0, release: 0, subscribe: 0 },
    failRenewals: new Set(),
    failAllRenewals: false,
    failReleases: false,
    releaseDelayMillis: 0,
    dropNotifications: false,
    layer: undefined as never
  }
  const wrapped: LockBackendShape = {
    name: inner.name,
    tryAcquire: (request) => Effect.suspend(() => (self.calls.tryAcquire++, inner.tryAcquire(request))),
    renew: (request) =>
      Effect.suspend(() => {
        self.calls.renew++
        return self.failAllRenewals || self.failRenewals.has(request.owner)
          ? Effect.fail(fault("renew", request.key))
          : inner.renew(request)
      }),
    release: (key, owner) =>
      Effect.suspend(() => {
        self.calls.release++
        const release = self.failReleases ? Effect.fail(fault("release", key)) : inner.release(key, owner)
        return self.releaseDelayMillis > 0 ? Effect.delay(release, self.releaseDelayMillis) : release
      }),
    forceRelease: inner.forceRelease,
    inspect: inner.inspect,
    subscribe: (key) =>
      Effect.suspend(() => {
        self.calls.subscribe++
        return Effect.map(inner.subscribe(key), (signal) => {
          // Waiting on, for the rest of the time, after a swallowed notification: the waiter never
          // learns of it.
          const awaitKept: typeof signal.await = (millis) =>
            Effect.flatMap(Clock.currentTimeMillis, (start) =>
              Effect.flatMap(signal.await(millis), (reason) => {
                if (reason !== "released" || !self.dropNotifications) return Effect.succeed(reason)
                return Effect.flatMap(Clock.currentTimeMillis, (now) => {
                  const left = millis - (now - start)
                  return left > 0 ? awaitKept(left) : Effect.succeed("timeout" as const)
                })
              }))
          return { ...signal, await: awaitKept }
        })
      }),
    localWaiters: inner.localWaiters
  }
  return Object.assign(self, { layer: Layer.succeed(LockBackend, wrapped) })
})
