/**
 * The Redis backend's read-write lock primitives (`LockKinds.read` and `LockKinds.write`): one
 * script round trip each (`readWriteScripts.ts`, `lua/rw-*.lua`), in Redisson 4.7's
 * `RedissonReadLock`/`RedissonWriteLock` layout. Both sides share one channel per name,
 * `redisson_rwlock:{<name>}`: one subscription per name (counted over both sides), whose messages
 * go to both sides' notification queues, since a release of either side may let either side in.
 *
 * Writers go first: a waiting writer's attempts keep a mark alive (one wait window, refreshed at
 * least every half window), and new readers wait while it is there; a writer that stops waiting
 * deletes its mark and wakes the readers (`abandon`).
 */
import type { Scope } from "effect"
import { Effect, Option, Queue } from "effect"
import type { AcquireResult, LockRequest, Notification } from "../../LockBackend.js"
import type { KindPrimitives } from "../../LockKinds.js"
import type { Commands } from "./commands.js"
import type { Connections } from "./connection.js"
import { backendName } from "./errors.js"
import type { KeyLayout } from "./keys.js"
import * as lockScripts from "./lockScripts.js"
import type { Side } from "./readWriteScripts.js"
import * as scripts from "./readWriteScripts.js"
import { renewBySlot } from "./renewBySlot.js"
import { hashSlot } from "./slot.js"
import { makeSubscriptions } from "./subscriptions.js"

const channelHead = "redisson_rwlock:"

export const makeRedisReadWrite = (
  connections: Connections,
  commands: Commands,
  layout: KeyLayout,
  prefix: string,
  windowMillis: number
): Effect.Effect<{ readonly read: KindPrimitives; readonly write: KindPrimitives }, never, Scope.Scope> =>
  Effect.gen(function*() {
    const { call, callTakingWith } = commands
    const publish = layout.pubsub === "sharded" ? "spublish" : "publish"
    const keysOf = (key: string) => scripts.readWriteKeysOf(prefix, key, publish)
    const unprefix = (name: string) => (name.startsWith(prefix) ? [name.slice(prefix.length)] : [])
    const subscriptions = yield* makeSubscriptions(connections, {
      ...layout,
      channelOf: (key) => keysOf(key).channel,
      // Redisson's naming maps both `a` and `{a}` to one channel: a message wakes both.
      keysOfChannel: (channel) => {
        if (!channel.startsWith(channelHead)) return []
        const rest = channel.slice(channelHead.length)
        const braced = rest.startsWith("{") && rest.endsWith("}") ? unprefix(rest.slice(1, -1)) : []
        return rest.includes("{") ? [...braced, ...unprefix(rest)] : braced
      }
    })
    const queues = {
      read: yield* Effect.acquireRelease(Queue.unbounded<Notification>(), Queue.shutdown),
      write: yield* Effect.acquireRelease(Queue.unbounded<Notification>(), Queue.shutdown)
    }
    yield* Queue.takeBetween(subscriptions.notifications, 1, Number.POSITIVE_INFINITY).pipe(
      Effect.flatMap((notifications) =>
        Effect.sync(() => {
          for (const notification of notifications) {
            Queue.unsafeOffer(queues.read, notification)
            Queue.unsafeOffer(queues.write, notification)
          }
        })
      ),
      Effect.forever,
      Effect.interruptible,
      Effect.forkScoped
    )
    // Subscribers per name over both sides: the channel stays while either side has waiters.
    const subscribers = new Map<string, number>()
    const subscribe = (key: string) =>
      Effect.suspend(() => {
        subscribers.set(key, (subscribers.get(key) ?? 0) + 1)
        return subscriptions.subscribe(key)
      })
    const unsubscribe = (key: string) =>
      Effect.suspend(() => {
        const count = (subscribers.get(key) ?? 0) - 1
        if (count > 0) {
          subscribers.set(key, count)
          return Effect.void
        }
        subscribers.delete(key)
        return subscriptions.unsubscribe(key)
      })

    // Half a window: a waiting writer comes back at least this often, so its mark stays alive.
    const keepAlive = Math.max(1, Math.floor(windowMillis / 2))

    const renew = (side: Side) => (requests: ReadonlyArray<LockRequest>) => {
      const renewOnce = (batch: ReadonlyArray<LockRequest>) =>
        call("renew", batch[0]?.key ?? "", scripts.renew, side, keysOf, batch)
      return requests.length === 0
        ? Effect.succeed([])
        : layout.pubsub === "sharded"
        // A script's keys share one slot on a cluster: one call per slot.
        ? renewBySlot(requests, (r) => hashSlot(keysOf(r.key).lock), renewOnce)
        : renewOnce(requests)
    }

    const common = (side: Side) => ({
      name: backendName,
      renew: renew(side),
      forceRelease: (key: string) => call("force-release", key, scripts.forceRelease, keysOf(key), side),
      inspect: (key: string) =>
        Effect.map(
          call("inspect", key, lockScripts.inspect, keysOf(key).lock),
          (info) => Option.map(scripts.holdersOf(info), (info) => ({ key, ...info }))
        ),
      subscribe,
      unsubscribe,
      notifications: queues[side]
    })

    const read: KindPrimitives = {
      ...common("read"),
      tryAcquire: (request) =>
        callTakingWith(
          { script: scripts.readRelease, input: [keysOf(request.key), request.owner] },
          "acquire",
          request,
          (result) => result._tag === "Acquired",
          scripts.readAcquire,
          keysOf(request.key),
          request
        ),
      release: (key, owner) => call("release", key, scripts.readRelease, keysOf(key), owner)
    }

    const write: KindPrimitives = {
      ...common("write"),
      tryAcquire: (request) =>
        callTakingWith(
          { script: scripts.writeRelease, input: [keysOf(request.key), request.owner] },
          "acquire",
          request,
          (result) => result._tag === "Acquired",
          scripts.writeAcquire,
          keysOf(request.key),
          request,
          windowMillis
        ).pipe(Effect.map((result): AcquireResult =>
          result._tag === "Busy" && request.waiting === true
            ? { _tag: "Busy", ttlMillis: Math.min(result.ttlMillis ?? keepAlive, keepAlive) }
            : result
        )),
      release: (key, owner) => call("release", key, scripts.writeRelease, keysOf(key), owner),
      abandon: (request) =>
        Effect.asVoid(call("acquire", request.key, scripts.abandon, keysOf(request.key), request.owner))
    }
    return { read, write }
  })
