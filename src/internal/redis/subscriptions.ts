/**
 * Release notifications over the subscriber connection: a channel is subscribed while its key has
 * local waiters, every message becomes a `Released` notification for the keys the channel may
 * belong to, and after a reconnect the channels are subscribed again and a `Missed` notification
 * wakes one waiter per key (releases published while the subscriber was away were lost).
 *
 * A failed SUBSCRIBE does not fail the waiter: it is only woken later, by its retry schedule or
 * the holder's lease.
 *
 * On a Redis Cluster the subscriptions are sharded (`SSUBSCRIBE`, one connection per master at
 * most, made by ioredis' sharded subscriber group). ioredis restores them itself when it
 * re-reads the slot map (a failover, a slot migration, a dropped connection): a subscriber
 * connection that goes away (`-subscriber`) marks every channel not live, and once the group is
 * back (`subscribersReady`) every wanted channel is live again and a `Missed` notification wakes
 * one waiter per key.
 */
import type { Scope } from "effect"
import { Effect, Queue } from "effect"
import type { EventEmitter } from "node:events"
import type { Notification } from "../../LockBackend.js"
import type { Connections } from "./connection.js"
import { backendName, messageOf } from "./errors.js"
import type { KeyLayout } from "./keys.js"

export interface Subscriptions {
  readonly subscribe: (key: string) => Effect.Effect<void>
  readonly unsubscribe: (key: string) => Effect.Effect<void>
  readonly notifications: Queue.Dequeue<Notification>
  /** Whether the subscriber is known to be subscribed to `channel` (SUBSCRIBE answered, not lost since). */
  readonly isLive: (channel: string) => boolean
}

const isEmitter = (value: unknown): value is EventEmitter =>
  typeof value === "object" && value !== null &&
  typeof (value as { emit?: unknown }).emit === "function" &&
  typeof (value as { listenerCount?: unknown }).listenerCount === "function"

/**
 * The sharded subscriber connections of an ioredis cluster client: `cluster.shardedSubscribers`
 * (its `ClusterSubscriberGroup`), a `Map` of `ShardedSubscriber`s with `getInstance()`. Private in
 * ioredis 5.x and 6.0, so read defensively: anything else gives none.
 */
const shardedInstances = (cluster: unknown): ReadonlyArray<EventEmitter> => {
  const group = (cluster as { readonly shardedSubscribers?: { readonly shardedSubscribers?: unknown } })
    .shardedSubscribers
  const subscribers = group?.shardedSubscribers
  if (!(subscribers instanceof Map)) return []
  const instances: Array<EventEmitter> = []
  for (const subscriber of subscribers.values()) {
    const getInstance = (subscriber as { readonly getInstance?: unknown }).getInstance
    const instance: unknown = typeof getInstance === "function" ? getInstance.call(subscriber) : undefined
    // An ioredis connection is an EventEmitter by mixin, not by `instanceof`.
    if (isEmitter(instance)) instances.push(instance)
  }
  return instances
}

const guarded = new WeakSet<EventEmitter>()

/**
 * Keep a sharded subscriber connection that ioredis has let go of from crashing the process.
 * ioredis' `ShardedSubscriber.stop()` (5.x and 6.0) disconnects its connection and removes every
 * listener, `error` included, while the socket may still deliver a reply. When the server drops
 * the channels of a slot its node lost (a failover, a migration), it sends `sunsubscribe` to that
 * connection; ioredis 5 finds no command waiting for it and emits `error` ("Command queue state
 * error"), which, with no listener, is thrown from the socket's data handler: an uncaught
 * exception. Seen once in about ten runs of test/cluster/failover.test.ts on ioredis 5, which
 * killed the test process. An `error` with no listener left is dropped instead; with a listener,
 * nothing changes.
 */
export const guardShardedSubscribers = (cluster: unknown): void => {
  for (const instance of shardedInstances(cluster)) {
    if (guarded.has(instance)) continue
    guarded.add(instance)
    const emit = instance.emit
    instance.emit = function(this: EventEmitter, event: string | symbol, ...args: Array<unknown>): boolean {
      if (event === "error" && this.listenerCount("error") === 0) return false
      return emit.call(this, event, ...args)
    }
  }
}

export const makeSubscriptions = (
  connections: Connections,
  layout: KeyLayout
): Effect.Effect<Subscriptions, never, Scope.Scope> =>
  Effect.gen(function*() {
    const { subscriber } = connections
    const queue = yield* Effect.acquireRelease(Queue.unbounded<Notification>(), Queue.shutdown)
    const wanted = new Set<string>()
    const live = new Set<string>()

    const logFailure = (operation: string, channels: ReadonlyArray<string>) => (error: unknown) =>
      Effect.logWarning(
        `Redis ${operation} failed; waiters fall back to their retry schedule and the holder's lease`
      ).pipe(Effect.annotateLogs({ backend: backendName, channels: channels.join(" "), error: messageOf(error) }))

    const sharded = layout.pubsub === "sharded"
    // Sharded: one SSUBSCRIBE per channel, since ioredis routes a call by its first channel's slot.
    const send = (command: "subscribe" | "unsubscribe", channels: ReadonlyArray<string>): Promise<unknown> =>
      sharded
        ? Promise.all(
          channels.map((channel) =>
            command === "subscribe" ? subscriber.ssubscribe(channel) : subscriber.sunsubscribe(channel)
          )
        )
        : command === "subscribe"
        ? subscriber.subscribe(...channels)
        : subscriber.unsubscribe(...channels)

    // A (un)subscription gets the command budget, like every call: one whose reply never comes (a
    // cluster client's subscriber caught between two slot maps) must not hold a waiter that leaves,
    // or the layer's close, forever. Interruptible even where the caller is not, as in connection.ts.
    const bounded = (command: "subscribe" | "unsubscribe", channels: ReadonlyArray<string>) =>
      Effect.tryPromise({ try: () => send(command, channels), catch: (error) => error }).pipe(
        Effect.interruptible,
        Effect.timeoutFail({
          duration: connections.commandTimeout,
          onTimeout: () => new Error(`no reply within the command timeout (${connections.commandTimeout} ms)`)
        })
      )

    const subscribeChannels = (channels: ReadonlyArray<string>) =>
      channels.length === 0 ? Effect.void : bounded("subscribe", channels).pipe(
        Effect.tap(() =>
          Effect.sync(() => {
            for (const channel of channels) live.add(channel)
          })
        ),
        Effect.asVoid,
        Effect.catchAll(logFailure(sharded ? "SSUBSCRIBE" : "SUBSCRIBE", channels))
      )

    const onMessage = (channel: string) => {
      // Any message is a hint to retry: Redisson and effect-lock publish "0".
      for (const key of layout.keysOfChannel(channel)) Queue.unsafeOffer(queue, { _tag: "Released", key })
    }
    const onClose = () => live.clear()
    const onReady = () =>
      connections.runFork(
        Effect.suspend(() => subscribeChannels(Array.from(wanted, layout.channelOf))).pipe(
          Effect.ensuring(Effect.sync(() => Queue.unsafeOffer(queue, { _tag: "Missed" })))
        )
      )
    // ioredis has subscribed every channel again: they are live, and releases may have been missed.
    const onShardsRestored = () => {
      for (const key of wanted) live.add(layout.channelOf(key))
      Queue.unsafeOffer(queue, { _tag: "Missed" })
    }
    // ioredis adds a sharded subscriber (`+subscriber`) for each master it finds, from the start.
    const onNewSubscriber = () => guardShardedSubscribers(subscriber)
    if (sharded) onNewSubscriber()
    yield* connections.listen(
      subscriber,
      sharded
        ? {
          smessage: onMessage,
          "-subscriber": onClose,
          "+subscriber": onNewSubscriber,
          close: onClose,
          subscribersReady: onShardsRestored
        }
        : { message: onMessage, close: onClose, ready: onReady }
    )

    return {
      subscribe: (key) =>
        Effect.suspend(() => {
          wanted.add(key)
          return subscribeChannels([layout.channelOf(key)])
        }),
      unsubscribe: (key) =>
        Effect.suspend(() => {
          wanted.delete(key)
          const channel = layout.channelOf(key)
          live.delete(channel)
          return bounded("unsubscribe", [channel]).pipe(
            Effect.asVoid,
            Effect.catchAll(logFailure(sharded ? "SUNSUBSCRIBE" : "UNSUBSCRIBE", [channel]))
          )
        }),
      notifications: queue,
      isLive: (channel) => live.has(channel)
    }
  })
