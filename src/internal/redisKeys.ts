/**
 * Redisson's RLock key layout. The braces put every key of one lock in the same cluster slot.
 */

const channelPrefix = "redisson_lock__channel:{"
const tokenPrefix = "redisson_lock_token:{"

/** The message a release publishes (Redisson's `LockPubSub.UNLOCK_MESSAGE`). */
export const unlockMessage = "0"

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
  readonly channelOf: (key: string) => string
  /** The lock key (without prefix) a channel belongs to, if it is one of ours. */
  readonly keyOfChannel: (channel: string) => string | undefined
}

export const makeKeyLayout = (prefix: string): KeyLayout => {
  const channelOf = (key: string) => `${channelPrefix}${prefix}${key}}`
  const channelHead = channelPrefix + prefix
  return {
    keysOf: (key) => {
      const lock = prefix + key
      return { lock, channel: `${channelPrefix}${lock}}`, token: `${tokenPrefix}${lock}}` }
    },
    channelOf,
    keyOfChannel: (channel) =>
      channel.startsWith(channelHead) && channel.endsWith("}")
        ? channel.slice(channelHead.length, -1)
        : undefined
  }
}
