/**
 * Redisson's RLock key layout. Companion keys are named as Redisson's `RedissonObject.prefixName`
 * names them: `<kind>:{<name>}`, or `<kind>:<name>` when the name already has a hash tag. Either
 * way every key of one lock falls in the same cluster slot, provided the name's hash tag, if it
 * has a `{`, is not empty (`slot.ts`; on a cluster other names are refused).
 *
 * The layout also says how releases are published, as Redisson's `getPublishCommand()` does:
 * `PUBLISH` on a standalone Redis, sharded `SPUBLISH` on a Redis Cluster (counted with `PUBSUB
 * NUMSUB` and `PUBSUB SHARDNUMSUB` respectively). Scripts get the command as an argument.
 */
import { hashTagProblem } from "./slot.js"

import { notificationKey, semaphoreKeyOf } from "../semaphore/primitives.js"

const channelKind = "redisson_lock__channel"
const tokenKind = "redisson_lock_token"
/** RedissonPermitExpirableSemaphore's channel: `redisson_sc:{<name>}`. */
const semaphoreChannelKind = "redisson_sc"
/** The semaphore's fencing counter: ours (Redisson's semaphore has none). */
const semaphoreTokenKind = "effect_lock_permit_token"

/** The message a release publishes (Redisson's `LockPubSub.UNLOCK_MESSAGE`). */
export const unlockMessage = "0"

export const prefixName = (kind: string, name: string) => name.includes("{") ? `${kind}:${name}` : `${kind}:{${name}}`

/** Redisson's `RedissonObject.suffixName`: `{<name>}:<suffix>`, or `<name>:<suffix>` when the name has a `{`. */
export const suffixName = (name: string, suffix: string) =>
  name.includes("{") ? `${name}:${suffix}` : `{${name}}:${suffix}`

/** The keys of a permit-expirable semaphore (RedissonPermitExpirableSemaphore's layout, plus a fencing counter). */
export interface SemaphoreKeys {
  /** The free count (a string). */
  readonly semaphore: string
  /** The timeout set: one member per held permit, scored by the end of its lease. */
  readonly timeouts: string
  readonly channel: string
  readonly token: string
  /** The command a script publishes on `channel` with. */
  readonly publish: PublishCommand
}

export interface RedisKeys {
  /** The lock hash. */
  readonly lock: string
  /** The release-notification channel. */
  readonly channel: string
  /** The fencing counter. */
  readonly token: string
  /** The command a script publishes on `channel` with. */
  readonly publish: PublishCommand
  /** The `PUBSUB` subcommand that counts `channel`'s subscribers. */
  readonly numsub: "numsub" | "shardnumsub"
}

/** `PUBLISH` (standalone) or sharded `SPUBLISH` (cluster). */
export type PublishCommand = "publish" | "spublish"

export type PubSubMode = "plain" | "sharded"

export interface KeyLayout {
  readonly pubsub: PubSubMode
  readonly keysOf: (key: string) => RedisKeys
  readonly semaphoreKeysOf: (key: string) => SemaphoreKeys
  /**
   * Why `key` cannot be a lock name in this layout, or `undefined`: on a cluster, a name whose
   * companion keys would land in another slot (an empty or unclosed hash tag).
   */
  readonly problemOf: (key: string) => string | undefined
  readonly channelOf: (key: string) => string
  /**
   * The lock keys (without prefix) a channel may belong to: Redisson's naming maps both `a` and
   * `{a}` to one channel, so a message is delivered to both (an extra wake-up is harmless).
   */
  readonly keysOfChannel: (channel: string) => ReadonlyArray<string>
}

export const makeKeyLayout = (prefix: string, pubsub: PubSubMode = "plain"): KeyLayout => {
  const channelHead = `${channelKind}:`
  const semaphoreHead = `${semaphoreChannelKind}:`
  const unprefix = (name: string) => (name.startsWith(prefix) ? [name.slice(prefix.length)] : [])
  const namesOf = (rest: string) => {
    const braced = rest.startsWith("{") && rest.endsWith("}") ? unprefix(rest.slice(1, -1)) : []
    return rest.includes("{") ? [...braced, ...unprefix(rest)] : braced
  }
  const publish: PublishCommand = pubsub === "sharded" ? "spublish" : "publish"
  const numsub = pubsub === "sharded" ? "shardnumsub" : "numsub"
  return {
    pubsub,
    keysOf: (key) => {
      const lock = prefix + key
      return { lock, channel: prefixName(channelKind, lock), token: prefixName(tokenKind, lock), publish, numsub }
    },
    problemOf: (key) => {
      if (pubsub === "plain") return undefined
      const problem = hashTagProblem(prefix + key)
      return problem === undefined || prefix === "" ? problem : `with the prefix "${prefix}" ${problem}`
    },
    semaphoreKeysOf: (key) => {
      const semaphore = prefix + key
      return {
        semaphore,
        timeouts: suffixName(semaphore, "timeout"),
        channel: prefixName(semaphoreChannelKind, semaphore),
        token: prefixName(semaphoreTokenKind, semaphore),
        publish
      }
    },
    // A semaphore's notification key (see `semaphore/primitives.ts`) travels on its own channel.
    channelOf: (key) => {
      const semaphore = semaphoreKeyOf(key)
      return semaphore === undefined
        ? prefixName(channelKind, prefix + key)
        : prefixName(semaphoreChannelKind, prefix + semaphore)
    },
    keysOfChannel: (channel) => {
      if (channel.startsWith(semaphoreHead)) return namesOf(channel.slice(semaphoreHead.length)).map(notificationKey)
      if (!channel.startsWith(channelHead)) return []
      return namesOf(channel.slice(channelHead.length))
    }
  }
}
