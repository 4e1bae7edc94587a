/**
 * Releases in flight. `withLock` does not wait for a release's reply (see `releaseOne`), but this
 * process does not acquire the same key again, under any owner, before that reply is in: a loop
 * that releases and re-acquires would otherwise always get its next acquire to the server right
 * behind its own release, ahead of every waiter in other processes, and starve them.
 */
import { Deferred, Effect, Exit, FiberId } from "effect"
import type { LockBackendShape } from "../LockBackend.js"

const inFlight = new WeakMap<LockBackendShape, Map<string, Deferred.Deferred<void>>>()

/** Note a release of `key` as sent; the returned callback marks its reply as in. */
export const track = (backend: LockBackendShape, key: string): () => void => {
  let releases = inFlight.get(backend)
  if (releases === undefined) {
    releases = new Map()
    inFlight.set(backend, releases)
  }
  const done = Deferred.unsafeMake<void>(FiberId.none)
  releases.set(key, done)
  return () => {
    if (releases.get(key) === done) releases.delete(key)
    Deferred.unsafeDone(done, Exit.void)
  }
}

/** Wait until this process's last release of `key` has its reply; at once when there is none. */
export const settled = (backend: LockBackendShape, key: string): Effect.Effect<void> | undefined => {
  const pending = inFlight.get(backend)?.get(key)
  return pending === undefined ? undefined : Deferred.await(pending)
}
