/**
 * `effect-lock watch`: the locks matching a pattern, kept current from two sources, and a log of
 * what changed. Release notifications (`redisson_lock__channel:*`, published by every release and
 * forced unlock) and keyspace events on the lock keys (`hset`/`hincrby` on acquisition,
 * `pexpire` on renewal, `del`, `expired`) each make the key be described again; a full refresh
 * every interval counts the TTLs down and catches what no event announced (keyspace events are
 * off by default in Redis). A change is the difference between two descriptions, so an event
 * that changed nothing prints nothing.
 *
 * On a Redis Cluster release notifications are sharded (`SSUBSCRIBE`), and a sharded channel
 * cannot be pattern-subscribed: `watch` subscribes to the release channels of the locks on its
 * table (each on its shard, through a cluster client with sharded subscribers) as they appear,
 * and drops them as they go. Keyspace events are local to each node in a cluster, so they are
 * pattern-subscribed on every master (those that publish them); locks nobody has seen yet show up
 * through them, or at the next refresh, which scans every master.
 *
 * On a terminal the screen is redrawn (alternate screen, cursor hidden, both restored on exit);
 * otherwise, or with `--json`, one line per change.
 */
import type { Scope } from "effect"
import { Clock, Effect, Queue } from "effect"
import type { Cluster, Redis } from "ioredis"
import { makeKeyLayout } from "../redis/keys.js"
import type { Connection, LockDescription, Target } from "./client.js"
import { callOn, connect, describe, list, redisKeysOf } from "./client.js"
import { CliError, ExitCode } from "./errors.js"
import { columns, duration, row, table } from "./format.js"

export interface WatchOptions {
  readonly json: boolean
  readonly intervalMillis: number
}

interface Change {
  readonly at: number
  readonly key: string
  readonly event: "acquired" | "released" | "expired" | "handed-over" | "reentered" | "exited"
  readonly lock: LockDescription
  readonly text: string
}

/** A Redis glob as a RegExp (`*`, `?`, `[...]`, `\\x`). */
const globToRegExp = (glob: string): RegExp => {
  const escape = (text: string) => text.replace(/[.*+?^${}()|[\]\\/]/g, "\\$&")
  let source = ""
  const chars = [...glob]
  for (let i = 0; i < chars.length; i++) {
    const c = chars[i] ?? ""
    if (c === "*") source += ".*"
    else if (c === "?") source += "."
    else if (c === "[" && chars.indexOf("]", i + 1) > i) {
      const end = chars.indexOf("]", i + 1)
      source += `[${chars.slice(i + 1, end).join("").replace(/^!/, "^").replace(/\\/g, "\\\\")}]`
      i = end
    } else if (c === "\\" && i + 1 < chars.length) source += escape(chars[++i] ?? "")
    else source += escape(c)
  }
  return new RegExp(`^${source}$`, "s")
}

const held = (lock: LockDescription | undefined): lock is LockDescription =>
  lock !== undefined && lock.holders.length > 0

const owners = (lock: LockDescription) => lock.holders.map((holder) => holder.owner).join(", ")

const totalCount = (lock: LockDescription) => lock.holders.reduce((sum, holder) => sum + holder.count, 0)

/** What happened between two descriptions of one key, if anything worth a line. */
const changeOf = (
  key: string,
  before: LockDescription | undefined,
  after: LockDescription,
  hint: string | undefined,
  at: number,
  elapsed: number
): Change | undefined => {
  const token = after.fencingToken === null ? "" : ` (token ${after.fencingToken})`
  if (!held(before) && held(after)) {
    return { at, key, event: "acquired", lock: after, text: `acquired by ${owners(after)}${token}` }
  }
  if (held(before) && !held(after)) {
    const previous = before
    const expired = hint === "expired" ||
      (hint === undefined && previous.ttlMillis !== null && previous.ttlMillis <= elapsed)
    return expired
      ? { at, key, event: "expired", lock: after, text: `expired (was held by ${owners(previous)})` }
      : { at, key, event: "released", lock: after, text: `released (was held by ${owners(previous)})` }
  }
  if (held(before) && held(after)) {
    if (owners(before) !== owners(after)) {
      return {
        at,
        key,
        event: "handed-over",
        lock: after,
        text: `handed over from ${owners(before)} to ${owners(after)}${token}`
      }
    }
    const was = totalCount(before)
    const now = totalCount(after)
    if (now > was) return { at, key, event: "reentered", lock: after, text: `reentered by ${owners(after)} (${now})` }
    if (now < was) return { at, key, event: "exited", lock: after, text: `left once by ${owners(after)} (${now})` }
  }
  return undefined
}

const clock = (at: number) => new Date(at).toISOString().slice(11, 23)

/** Keyspace events that announce every lock change: K (keyspace channel) and the hash, generic and expiry classes. */
const keyspaceEventsOn = (flags: string) =>
  flags.includes("K") && (flags.includes("A") || /(?=.*h)(?=.*g)(?=.*x)/.test(flags))

/** A connection of its own for subscribing, made like `redis`, closed with the scope. */
const subscriberFor = (connection: Connection, redis: Redis): Effect.Effect<Redis, CliError, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.sync(() => redis.duplicate({ connectionName: "effect-lock-cli-watch", lazyConnect: true })),
    (redis) => Effect.sync(() => redis.disconnect())
  ).pipe(
    Effect.tap((redis) =>
      Effect.tryPromise({
        try: () => {
          redis.on("error", () => {})
          return redis.connect()
        },
        catch: () =>
          new CliError({
            message: `cannot open a subscriber connection to Redis at ${connection.host}`,
            exitCode: ExitCode.unreachable
          })
      })
    )
  )

/** The cluster's sharded subscribers (one connection per master with channels), closed with the scope. */
const shardedSubscriberFor = (
  connection: Connection,
  cluster: Cluster
): Effect.Effect<Cluster, CliError, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.sync(() =>
      cluster.duplicate([], {
        shardedSubscribers: true,
        lazyConnect: true,
        redisOptions: { ...cluster.options.redisOptions, connectionName: "effect-lock-cli-watch" }
      })
    ),
    (cluster) => Effect.sync(() => cluster.disconnect())
  ).pipe(
    Effect.tap((cluster) =>
      Effect.tryPromise({
        try: () => {
          cluster.on("error", () => {})
          return cluster.connect()
        },
        catch: () =>
          new CliError({
            message: `cannot open a subscriber connection to the cluster at ${connection.host}`,
            exitCode: ExitCode.unreachable
          })
      })
    )
  )

export const watch = (target: Target, pattern: string, options: WatchOptions) =>
  Effect.gen(function*() {
    const connection = yield* connect(target)
    const { prefix } = target
    const matches = globToRegExp(pattern)
    const layout = makeKeyLayout(prefix)
    // Every master's setting (a cluster's nodes publish their own keys' events only).
    const masters = connection.masters()
    const settings = yield* Effect.forEach(masters, (master) =>
      callOn<Array<string>>(connection, master, "CONFIG", "GET", "notify-keyspace-events").pipe(
        Effect.map((reply) =>
          reply[1] ?? ""
        ),
        Effect.orElseSucceed(() => undefined)
      ))
    const flags = settings.find((setting) => setting === undefined || !keyspaceEventsOn(setting)) ?? settings[0]
    const keyspace = flags !== undefined && keyspaceEventsOn(flags)
    const db = connection.cluster ? 0 : (connection.redis as Redis).options.db ?? 0
    const keyspaceHead = `__keyspace@${db}__:`
    const readWriteHead = "redisson_rwlock:"

    // (name, hint): a key to describe again, and the event that said so.
    const pending = yield* Queue.unbounded<readonly [string, string | undefined]>()
    const onKeyspace = (channel: string, message: string) => {
      const redisKey = channel.slice(keyspaceHead.length)
      if (!redisKey.startsWith(prefix)) return
      const name = redisKey.slice(prefix.length)
      if (matches.test(name)) Queue.unsafeOffer(pending, [name, message])
    }
    const onRelease = (channel: string) => {
      // A read-write lock's channel names its lock as the plain lock's channel does.
      const released = channel.startsWith(readWriteHead)
        ? `redisson_lock__channel:${channel.slice(readWriteHead.length)}`
        : channel
      for (const name of layout.keysOfChannel(released)) {
        if (matches.test(name)) Queue.unsafeOffer(pending, [name, "released"])
      }
    }
    const onPattern = (_pattern: string, channel: string, message: string) =>
      channel.startsWith(keyspaceHead) ? onKeyspace(channel, message) : onRelease(channel)
    const cannotSubscribe = () =>
      new CliError({ message: `cannot subscribe on Redis at ${connection.host}`, exitCode: ExitCode.unreachable })

    // The release channels of the locks on the table, on a cluster (sharded: no patterns).
    let follow: (name: string, held: boolean) => Effect.Effect<void> = () => Effect.void
    // Names whose release channel watch itself subscribes to: its subscription is no waiter.
    const followed = new Set<string>()
    if (connection.cluster) {
      for (const [i, master] of masters.entries()) {
        const setting = settings[i]
        if (setting === undefined || !keyspaceEventsOn(setting)) continue
        const subscriber = yield* subscriberFor(connection, master)
        subscriber.on("pmessage", onPattern)
        yield* Effect.tryPromise({
          try: () => subscriber.psubscribe(`${keyspaceHead}${prefix}*`),
          catch: cannotSubscribe
        })
      }
      const sharded = yield* shardedSubscriberFor(connection, connection.redis as Cluster)
      sharded.on("smessage", (channel: string) => onRelease(channel))
      follow = (name, held) =>
        Effect.gen(function*() {
          if (held === followed.has(name)) return
          const keys = redisKeysOf(target, name)
          const channels = [keys.channel, keys.readWriteChannel]
          if (held) followed.add(name)
          else followed.delete(name)
          // One channel per call: ioredis routes a sharded (un)subscription by its channel's slot.
          // A refused or failed one leaves the lock to the refreshes.
          yield* Effect.forEach(channels, (channel) =>
            Effect.tryPromise(() =>
              held ? sharded.ssubscribe(channel) : sharded.sunsubscribe(channel)
            ).pipe(
              Effect.interruptible,
              Effect.timeout("5 seconds"),
              Effect.ignore
            ), { discard: true })
        })
    } else {
      const subscriber = yield* subscriberFor(connection, connection.redis as Redis)
      subscriber.on("pmessage", onPattern)
      const patterns = [
        "redisson_lock__channel:*",
        `${readWriteHead}*`,
        ...(keyspace ? [`${keyspaceHead}${prefix}*`] : [])
      ]
      yield* Effect.tryPromise({ try: () => subscriber.psubscribe(...patterns), catch: cannotSubscribe })
    }

    const tty = process.stdout.isTTY === true && !options.json
    const rows = new Map<string, { readonly lock: LockDescription; readonly at: number }>()
    const log: Array<string> = []
    const releases = connection.cluster ? "sharded release notifications of the locks shown" : "release notifications"
    const note = keyspace
      ? `${releases} and keyspace events`
      : `${releases}; keyspace events are off (notify-keyspace-events ${
        flags === undefined ? "unreadable" : `"${flags}"`
      }), so acquisitions and expiries show at the next refresh`

    const write = (text: string) => Effect.sync(() => process.stdout.write(text))
    if (tty) {
      // Alternate screen and hidden cursor, given back however the command ends (Ctrl-C included).
      yield* Effect.acquireRelease(write("\x1b[?1049h\x1b[?25l"), () => write("\x1b[?25h\x1b[?1049l"))
    } else if (!options.json) {
      yield* write(`watching ${pattern} on ${connection.host} (${note}); Ctrl-C to stop\n`)
    }

    const render = Effect.gen(function*() {
      if (!tty) return
      const now = yield* Clock.currentTimeMillis
      const locks = [...rows.values()].map(({ lock }) => lock).filter(held).sort((a, b) => a.key.localeCompare(b.key))
      const screen = [
        `effect-lock watch ${pattern} on ${connection.host}   ${clock(now)}   Ctrl-C to quit`,
        `from ${note}; refresh every ${duration(options.intervalMillis)}`,
        "",
        locks.length === 0 ? "no locks held" : table(columns, locks.map(row)),
        "",
        "recent changes:",
        ...(log.length === 0 ? ["(none yet)"] : log)
      ]
      yield* write(`\x1b[H\x1b[2J${screen.join("\n")}\n`)
    })

    const report = (change: Change) =>
      Effect.gen(function*() {
        const line = `${clock(change.at)}  ${change.key}  ${change.text}`
        log.push(line)
        if (log.length > 12) log.shift()
        if (options.json) {
          yield* write(
            JSON.stringify({
              at: new Date(change.at).toISOString(),
              key: change.key,
              event: change.event,
              holders: change.lock.holders,
              ttlMillis: change.lock.ttlMillis,
              fencingToken: change.lock.fencingToken,
              waiters: change.lock.waiters
            }) + "\n"
          )
        } else if (!tty) yield* write(line + "\n")
      })

    const update = (name: string, described: LockDescription, hint: string | undefined) =>
      Effect.gen(function*() {
        const lock = followed.has(name) && described.waiters > 0
          ? { ...described, waiters: described.waiters - 1 }
          : described
        const at = yield* Clock.currentTimeMillis
        const before = rows.get(name)
        const change = changeOf(name, before?.lock, lock, hint, at, before === undefined ? 0 : at - before.at)
        if (held(lock)) rows.set(name, { lock, at })
        else rows.delete(name)
        yield* follow(name, held(lock))
        if (change !== undefined) yield* report(change)
      })

    const refresh = Effect.gen(function*() {
      const locks = yield* list(connection, pattern)
      const seen = new Set<string>()
      for (const lock of locks) {
        seen.add(lock.key)
        yield* update(lock.key, lock, undefined)
      }
      for (const name of [...rows.keys()]) {
        if (seen.has(name)) continue
        const described = yield* describe(connection, name)
        if (described._tag === "Lock") yield* update(name, described.description, undefined)
        else {
          rows.delete(name)
          yield* follow(name, false)
        }
      }
    })

    // The locks already held are the starting point, not changes.
    for (const lock of yield* list(connection, pattern)) {
      rows.set(lock.key, { lock, at: yield* Clock.currentTimeMillis })
      yield* follow(lock.key, true)
    }
    yield* render
    let nextRefresh = (yield* Clock.currentTimeMillis) + options.intervalMillis
    while (true) {
      const now = yield* Clock.currentTimeMillis
      const next = yield* Queue.take(pending).pipe(Effect.timeout(Math.max(0, nextRefresh - now)), Effect.option)
      if (next._tag === "Some") {
        const [name, hint] = next.value
        const described = yield* describe(connection, name)
        // A hash of data written under a matching name is not a lock: only its disappearance counts.
        if (described._tag === "Lock" && (described.lockShaped || !held(described.description))) {
          yield* update(name, described.description, hint)
        }
      } else {
        yield* refresh
        nextRefresh = (yield* Clock.currentTimeMillis) + options.intervalMillis
      }
      yield* render
    }
  })
