/**
 * The Redis backend's fair lock primitives (`LockKinds.fair`): one script round trip each
 * (`fairScripts.ts`), and notifications on Redisson's per-owner channels: a waiting owner that is
 * in line listens on `redisson_lock__channel:{<name>}:<owner>`, where a release tells exactly the
 * next owner in line. The channel is subscribed after the attempt that put the owner in line, and
 * dropped when it gets the lock or leaves; the attempt right after subscribing (the wait loop makes
 * it at once) covers a release in between.
 */
import { Effect, Option } from "effect"
import type { AcquireResult, LockRequest } from "../../LockBackend.js"
import type { KindPrimitives } from "../../LockKinds.js"
import type { Commands } from "./commands.js"
import type { Connections } from "./connection.js"
import { backendName } from "./errors.js"
import * as fairScripts from "./fairScripts.js"
import type { KeyLayout } from "./keys.js"
import * as lockScripts from "./lockScripts.js"
import { renewBySlot } from "./renewBySlot.js"
import { hashSlot } from "./slot.js"
import { makeSubscriptions } from "./subscriptions.js"

export const makeRedisFair = (
  connections: Connections,
  commands: Commands,
  layout: KeyLayout,
  prefix: string,
  windowMillis: number
) =>
  Effect.gen(function*() {
    const { call, callTakingWith } = commands
    const publish = layout.pubsub === "sharded" ? "spublish" : "publish"
    const keysOf = (key: string) => fairScripts.fairKeysOf(prefix, key, publish)
    // Subscriptions by owner channel; each channel's messages are notifications for its lock name.
    const channelKeys = new Map<string, string>()
    const byKey = new Map<string, Set<string>>()
    const subscriptions = yield* makeSubscriptions(connections, {
      ...layout,
      channelOf: (channel) => channel,
      keysOfChannel: (channel) => {
        const key = channelKeys.get(channel)
        return key === undefined ? [] : [key]
      }
    })
    const listen = (key: string, owner: string) =>
      Effect.suspend(() => {
        const channel = fairScripts.ownerChannel(keysOf(key), owner)
        if (channelKeys.has(channel)) return Effect.void
        channelKeys.set(channel, key)
        let channels = byKey.get(key)
        if (channels === undefined) byKey.set(key, channels = new Set())
        channels.add(channel)
        return subscriptions.subscribe(channel)
      })
    const stopListening = (key: string, owner: string) => {
      const channel = fairScripts.ownerChannel(keysOf(key), owner)
      if (!channelKeys.delete(channel)) return
      const channels = byKey.get(key)
      channels?.delete(channel)
      if (channels?.size === 0) byKey.delete(key)
      connections.runFork(subscriptions.unsubscribe(channel))
    }
    // Half a window: a waiter comes back at least this often, so a live one keeps its place.
    const keepAlive = Math.floor(windowMillis / 2)

    const primitives: KindPrimitives = {
      name: backendName,
      tryAcquire: (request) =>
        callTakingWith(
          // Undone by the fair release, which tells the next in line.
          { script: fairScripts.release, input: [keysOf(request.key), request.owner, windowMillis] },
          "acquire",
          request,
          (result) => result._tag === "Acquired",
          fairScripts.acquire,
          keysOf(request.key),
          request,
          windowMillis
        ).pipe(Effect.flatMap((result): Effect.Effect<AcquireResult> => {
          if (result._tag === "Acquired") {
            stopListening(request.key, request.owner)
            return Effect.succeed(result)
          }
          const wait = result.ttlMillis === undefined ? keepAlive : Math.min(result.ttlMillis, keepAlive)
          if (request.waiting !== true) return Effect.succeed(result)
          const channel = fairScripts.ownerChannel(keysOf(request.key), request.owner)
          if (channelKeys.has(channel)) return Effect.succeed({ _tag: "Busy", ttlMillis: wait })
          // Newly in line: listen for our turn, then try again at once (a release may have slipped
          // in between the attempt and the subscription).
          return Effect.as(listen(request.key, request.owner), { _tag: "Busy", ttlMillis: 0 })
        })),
      renew: (requests) => {
        const renewOnce = (batch: ReadonlyArray<LockRequest>) =>
          call("renew", batch[0]?.key ?? "", lockScripts.renew, batch.map((r) => layout.keysOf(r.key).lock), batch)
        return requests.length === 0
          ? Effect.succeed([])
          : layout.pubsub === "sharded"
          // A script's keys share one slot on a cluster: one call per slot.
          ? renewBySlot(requests, (r) => hashSlot(layout.keysOf(r.key).lock), renewOnce)
          : renewOnce(requests)
      },
      release: (key, owner) => call("release", key, fairScripts.release, keysOf(key), owner, windowMillis),
      abandon: (request) =>
        Effect.suspend(() => {
          stopListening(request.key, request.owner)
          return Effect.asVoid(
            call("acquire", request.key, fairScripts.abandon, keysOf(request.key), request.owner, windowMillis)
          )
        }),
      forceRelease: (key) => call("force-release", key, lockScripts.forceRelease, layout.keysOf(key)),
      inspect: (key) =>
        Effect.map(
          call("inspect", key, lockScripts.inspect, layout.keysOf(key).lock),
          Option.map((info) => ({ key, ...info }))
        ),
      // The owner channels are subscribed by the attempts; a key's last waiter leaving drops any left.
      subscribe: () => Effect.void,
      unsubscribe: (key) =>
        Effect.sync(() => {
          for (const channel of byKey.get(key) ?? []) {
            channelKeys.delete(channel)
            connections.runFork(subscriptions.unsubscribe(channel))
          }
          byKey.delete(key)
        }),
      notifications: subscriptions.notifications
    }
    return primitives
  })
