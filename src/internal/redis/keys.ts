/**
 * Redisson's RLock key layout. Companion keys are named as Redisson's `RedissonObject.prefixName`
 * names them: `<kind>:{<name>}`, or `<kind>:<name>` when the name already has a hash tag. Either
 * way every key of one lock falls in the same cluster slot.
 */

const channelKind = "redisson_lock__channel"
const tokenKind = "redisson_lock_token"

/** The message a release publishes (Redisson's `LockPubSub.UNLOCK_MESSAGE`). */
export const unlockMessage = "0"

const prefixName = (kind: string, name: string) => name.includes("{") ? `${kind}:${name}` : `${kind}:{${name}}`

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
  /**
   * The lock keys (without prefix) a channel may belong to: Redisson's naming maps both `a` and
   * `{a}` to one channel, so a message is delivered to both (an extra wake-up is harmless).
   */
  readonly keysOfChannel: (channel: string) => ReadonlyArray<string>
}

export const makeKeyLayout = (prefix: string): KeyLayout => {
  const channelHead = `${channelKind}:`
  const unprefix = (name: string) => (name.startsWith(prefix) ? [name.slice(prefix.length)] : [])
  return {
    keysOf: (key) => {
      const lock = prefix + key
      return { lock, channel: prefixName(channelKind, lock), token: prefixName(tokenKind, lock) }
    },
    channelOf: (key) => prefixName(channelKind, prefix + key),
    keysOfChannel: (channel) => {
      if (!channel.startsWith(channelHead)) return []
      const rest = channel.slice(channelHead.length)
      const braced = rest.startsWith("{") && rest.endsWith("}") ? unprefix(rest.slice(1, -1)) : []
      return rest.includes("{") ? [...braced, ...unprefix(rest)] : braced
    }
  }
}
