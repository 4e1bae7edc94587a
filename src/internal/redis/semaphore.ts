/**
 * The Redis backend's semaphore primitives: one script round trip each, in
 * RedissonPermitExpirableSemaphore's layout (`semaphoreScripts.ts`, `lua/semaphore-*.lua`).
 */
import { Effect } from "effect"
import type { PermitRequest, SemaphorePrimitives } from "../semaphore/primitives.js"
import type { Commands } from "./commands.js"
import type { KeyLayout } from "./keys.js"
import { renewBySlot } from "./renewBySlot.js"
import * as scripts from "./semaphoreScripts.js"
import { hashSlot } from "./slot.js"

export const makeRedisSemaphores = ({ call, callTakingWith }: Commands, layout: KeyLayout): SemaphorePrimitives => {
  const renewOnce = (requests: ReadonlyArray<PermitRequest>) =>
    call(
      "renew",
      requests[0]?.key ?? "",
      scripts.renew,
      requests.map((r) => layout.semaphoreKeysOf(r.key).timeouts),
      requests
    )
  return {
    // An acquisition whose reply was lost, or that no replica confirmed (replica sync), gives its
    // permits back: the owner id is fresh per acquisition, so this releases nothing else.
    tryAcquire: (request) =>
      callTakingWith(
        { script: scripts.release, input: [layout.semaphoreKeysOf(request.key), request.owner, request.permits] },
        "acquire",
        request,
        (result) => result._tag === "Acquired",
        scripts.acquire,
        layout.semaphoreKeysOf(request.key),
        request
      ),
    renew: (requests) =>
      requests.length === 0
        ? Effect.succeed([])
        : layout.pubsub === "sharded"
        // A script's keys share one slot on a cluster: one call per slot.
        ? renewBySlot(requests, (r) => hashSlot(layout.semaphoreKeysOf(r.key).timeouts), renewOnce)
        : renewOnce(requests),
    release: (key, owner, permits) =>
      permits < 1
        ? Effect.succeed(0)
        : call("release", key, scripts.release, layout.semaphoreKeysOf(key), owner, permits),
    state: (key) => call("inspect", key, scripts.state, layout.semaphoreKeysOf(key)),
    setPermits: (key, total) =>
      Effect.asVoid(call("set-permits", key, scripts.setPermits, layout.semaphoreKeysOf(key), total))
  }
}
