/**
 * Redisson's RLock key layout. Companion keys are named as Redisson's `RedissonObject.prefixName`
 * names them: `<kind>:{<name>}`, or `<kind>:<name>` when the name already has a hash tag. Either
 * way every key of one lock falls in the same cluster slot.
 */

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
}

export interface RedisKeys {
  /** The lock hash. */
  readonly lock: string
  /** The release-notification channel. */
  readonly channel: string
  /** The fencing counter. */
  readonly token: string
}

export interface KeyLayout {
  readonly keysOf: (key: string) => RedisKeys
  readonly semaphoreKeysOf: (key: string) => SemaphoreKeys
  readonly channelOf: (key: string) => string
  /**
   * The lock keys (without prefix) a channel may belong to: Redisson's naming maps both `a` and
   * `{a}` to one channel, so a message is delivered to both (an extra wake-up is harmless).
   */
  readonly keysOfChannel: (channel: string) => ReadonlyArray<string>
}

export const makeKeyLayout = (prefix: string): KeyLayout => {
  const channelHead = `${channelKind}:`
  const semaphoreHead = `${semaphoreChannelKind}:`
  const unprefix = (name: string) => (name.startsWith(prefix) ? [name.slice(prefix.length)] : [])
  const namesOf = (rest: string) => {
    const braced = rest.startsWith("{") && rest.endsWith("}") ? unprefix(rest.slice(1, -1)) : []
    return rest.includes("{") ? [...braced, ...unprefix(rest)] : braced
  }
  return {
    keysOf: (key) => {
      const lock = prefix + key
      return { lock, channel: prefixName(channelKind, lock), token: prefixName(tokenKind, lock) }
    },
    semaphoreKeysOf: (key) => {
      const semaphore = prefix + key
      return {
        semaphore,
        timeouts: suffixName(semaphore, "timeout"),
        channel: prefixName(semaphoreChannelKind, semaphore),
        token: prefixName(semaphoreTokenKind, semaphore)
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
