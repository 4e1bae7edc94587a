/**
 * Least privilege: the ACL rule an effect-lock user needs (the commands the connections and the
 * scripts run, the key patterns of the locks and their companion keys, the channel patterns of
 * the release notifications), and the check the backend runs at startup that names whatever part
 * of it the user lacks.
 *
 * The check asks Redis (`redis.acl_check_cmd`, Redis 7.0+) about each command on probe names
 * under the prefix, both without and with a hash tag (Redisson names companion keys
 * `kind:{name}`, or `kind:name` when the name holds `{`). Each question depends on one command
 * and at most one key or channel pattern of the rule; a pattern or command that some allowed
 * question proves granted is cleared, and a refused question whose other dependency is proven
 * names the one that is missing.
 */
import type { BackendOperation } from "../../LockError.js"
import { fairKeysOf, ownerChannel } from "./fairScripts.js"
import { makeKeyLayout } from "./keys.js"
import type { RedisKeys } from "./keys.js"
import { readWriteKeysOf, timeoutPrefix } from "./readWriteScripts.js"
import type { Script } from "./scripts.js"
import { defineScript } from "./scripts.js"

/** The commands run by the connections themselves (ioredis' ready check and CLIENT SETNAME). */
const connectionCommands = ["+info", "+client|setname"] as const
/**
 * What an ioredis `Cluster` runs on its own: `CLUSTER SLOTS` to learn (and refresh) the slot map,
 * `CLUSTER INFO` as its ready check (unless `enableReadyCheck: false`), and `READONLY` on every
 * connection it opens to a replica (refused quietly, but each refusal lands in `ACL LOG`).
 */
const clusterCommands = ["+cluster|slots", "+cluster|info", "+readonly"] as const
/** Loading and running the scripts (EVAL after a NOSCRIPT). */
const scriptingCommands = ["+script|load", "+evalsha", "+eval"] as const
/** The subscriber connection. */
const subscriberCommands = ["+subscribe", "+unsubscribe"] as const
/** The sharded subscribers of a cluster (one per master with channels). */
const shardedSubscriberCommands = ["+ssubscribe", "+sunsubscribe"] as const
/** What the scripts run on the lock and its fencing counter (the channel is one of their KEYS too). */
const keyCommands = [
  "+exists",
  "+hexists",
  "+hincrby",
  "+hgetall",
  "+pexpire",
  "+pttl",
  "+del",
  "+type",
  "+incr",
  "+get",
  "+hget",
  "+hset",
  "+hdel",
  "+set",
  // The semaphore's and the fair lock's scripts: counts, timeout sets, the fair lock's line.
  "+decrby",
  "+incrby",
  "+lindex",
  "+lpop",
  "+lpos",
  "+lrange",
  "+lrem",
  "+rpush",
  "+zadd",
  "+zcard",
  "+zincrby",
  "+zrange",
  "+zrangebyscore",
  "+zrem",
  "+zscore"
] as const
/** Server time in the semaphore's and the fair lock's scripts (no key). */
const serverCommands = ["+time"] as const
/** What the scripts run on the release channel. */
const channelCommands = ["+publish", "+pubsub|numsub"] as const
/** What the scripts run on the release channel on a cluster (sharded pub/sub). */
const shardedChannelCommands = ["+spublish", "+pubsub|shardnumsub"] as const

/** Where the backend runs: one server (or a Sentinel-managed master), or a Redis Cluster. */
export interface RuleOptions {
  /** A Redis Cluster: sharded pub/sub and the cluster client's own commands. */
  readonly cluster?: boolean | undefined
}

// Redis' glob: `*`, `?`, `[...]` and `\` are special in a pattern; braces are not.
const escapeGlob = (text: string) => text.replace(/[*?[\]\\]/g, "\\$&")

interface Patterns {
  readonly lock: string
  readonly tokenBraced: string
  readonly tokenPlain: string
  readonly channelKeyBraced: string
  readonly channelKeyPlain: string
  readonly channelBraced: string
  readonly channelPlain: string
  /** `{<prefix>...`: a read-write lock's per-reader timeout keys and waiting-writer mark. */
  readonly suffixed: string
  readonly rwChannelKeyBraced: string
  readonly rwChannelKeyPlain: string
  readonly rwChannelBraced: string
  readonly rwChannelPlain: string
  readonly permitTokenBraced: string
  readonly permitTokenPlain: string
  readonly semChannelKeyBraced: string
  readonly semChannelKeyPlain: string
  readonly semChannelBraced: string
  readonly semChannelPlain: string
  readonly queueBraced: string
  readonly queuePlain: string
  readonly fairTimeoutBraced: string
  readonly fairTimeoutPlain: string
}

const patternsOf = (prefix: string): Patterns => {
  const p = escapeGlob(prefix)
  return {
    lock: `~${p}*`,
    tokenBraced: `~redisson_lock_token:{${p}*`,
    tokenPlain: `~redisson_lock_token:${p}*`,
    channelKeyBraced: `~redisson_lock__channel:{${p}*`,
    channelKeyPlain: `~redisson_lock__channel:${p}*`,
    channelBraced: `&redisson_lock__channel:{${p}*`,
    channelPlain: `&redisson_lock__channel:${p}*`,
    suffixed: `~{${p}*`,
    rwChannelKeyBraced: `~redisson_rwlock:{${p}*`,
    rwChannelKeyPlain: `~redisson_rwlock:${p}*`,
    rwChannelBraced: `&redisson_rwlock:{${p}*`,
    rwChannelPlain: `&redisson_rwlock:${p}*`,
    permitTokenBraced: `~effect_lock_permit_token:{${p}*`,
    permitTokenPlain: `~effect_lock_permit_token:${p}*`,
    semChannelKeyBraced: `~redisson_sc:{${p}*`,
    semChannelKeyPlain: `~redisson_sc:${p}*`,
    semChannelBraced: `&redisson_sc:{${p}*`,
    semChannelPlain: `&redisson_sc:${p}*`,
    queueBraced: `~redisson_lock_queue:{${p}*`,
    queuePlain: `~redisson_lock_queue:${p}*`,
    fairTimeoutBraced: `~redisson_lock_timeout:{${p}*`,
    fairTimeoutPlain: `~redisson_lock_timeout:${p}*`
  }
}

/**
 * The rule, one ACL token per entry, for a backend with `prefix`. Without a prefix the key
 * pattern is every key (`~*`). On a cluster the pub/sub commands are the sharded ones and the
 * cluster client's commands come after the connections'.
 */
export const aclRule = (prefix: string, options: RuleOptions = {}): ReadonlyArray<string> => {
  const cluster = options.cluster === true
  const patterns = patternsOf(prefix)
  const keyPatterns = prefix === ""
    ? ["~*"]
    : [
      patterns.lock,
      patterns.tokenBraced,
      patterns.tokenPlain,
      patterns.channelKeyBraced,
      patterns.channelKeyPlain,
      patterns.suffixed,
      patterns.rwChannelKeyBraced,
      patterns.rwChannelKeyPlain,
      patterns.permitTokenBraced,
      patterns.permitTokenPlain,
      patterns.semChannelKeyBraced,
      patterns.semChannelKeyPlain,
      patterns.queueBraced,
      patterns.queuePlain,
      patterns.fairTimeoutBraced,
      patterns.fairTimeoutPlain
    ]
  const channelPatterns = prefix === ""
    ? ["&redisson_lock__channel:*", "&redisson_rwlock:*", "&redisson_sc:*"]
    : [
      patterns.channelBraced,
      patterns.channelPlain,
      patterns.rwChannelBraced,
      patterns.rwChannelPlain,
      patterns.semChannelBraced,
      patterns.semChannelPlain
    ]
  return [
    ...connectionCommands,
    ...(cluster ? clusterCommands : []),
    ...scriptingCommands,
    ...(cluster ? shardedSubscriberCommands : subscriberCommands),
    ...keyCommands,
    ...serverCommands,
    ...(cluster ? shardedChannelCommands : channelCommands),
    ...keyPatterns,
    ...channelPatterns
  ]
}

const operationNeeds: Partial<Record<BackendOperation, string>> = {
  "connect": "+info +client|setname (a Redis Cluster: +cluster|slots +cluster|info +readonly too)",
  "load-scripts": "+script|load",
  "acquire": "+evalsha +eval, and +exists +hexists +hincrby +pexpire +pttl +type +incr +get" +
    " (a read-write lock: +hget +hset +hdel +hgetall +set;" +
    " a semaphore: +time +zrangebyscore +zrem +incrby +decrby +set +zcard +zscore +zadd +zrange, and +publish on its channel;" +
    " a fair lock: +hget +hset +del +time +lindex +lpop +lpos +lrange +lrem +rpush +zadd +zincrby +zrange +zrem +zscore," +
    " and +publish on its waiters' channels) on the lock's keys",
  "renew": "+evalsha +eval, and +hexists +pexpire +exists" +
    " (a read-write lock: +hget +hdel +pttl; a semaphore: +time +zscore +zadd) on the lock's keys",
  "release": "+evalsha +eval, +hexists +hincrby +del" +
    " (a read-write lock: +hget +hset +hdel +hgetall +pttl +pexpire; a semaphore: +type +zrem +incrby;" +
    " a fair lock: +time +lindex +lpop +zadd +zrem +zscore) on the lock's keys" +
    " and +publish +pubsub|numsub on its channel (a fair lock: the next waiter's)",
  "force-release": "+evalsha +eval, +del (a read-write lock: +hget) on the lock's keys and +publish on its channel",
  "inspect": "+evalsha +eval, and +pttl +hgetall on the lock" +
    " (a semaphore: +type +time +zrangebyscore +zrem +incrby +get +zcard on its keys and +publish on its channel)",
  "set-permits":
    "+evalsha +eval, +type +time +zrangebyscore +zrem +zcard +set on the semaphore's keys and +publish on its channel",
  "subscribe": "+subscribe +unsubscribe on the lock's channel"
}

/** What `operation` needs, in ACL terms, for messages. */
export const needsOf = (operation: BackendOperation): string | undefined => {
  const needs = operationNeeds[operation]
  return needs !== undefined && /publish|subscribe|numsub/.test(needs)
    ? `${needs} (on a Redis Cluster +spublish +pubsub|shardnumsub +ssubscribe +sunsubscribe` +
      " instead of +publish +pubsub|numsub +subscribe +unsubscribe)"
    : needs
}

export const checkPermissions = defineScript({
  name: "check-permissions",
  encode: (questions: ReadonlyArray<Question>) =>
    [[], questions.flatMap((q) => [String(q.command.length), ...q.command])] as const,
  decode: (reply): ReadonlyArray<number> | undefined => {
    if (reply === -1) return []
    if (!Array.isArray(reply) || !reply.every((r) => r === 1 || r === 0 || r === -1)) return undefined
    return reply as ReadonlyArray<number>
  }
}) as Script<[ReadonlyArray<Question>], ReadonlyArray<number>>

/** One question for Redis: may the user run `command`? It depends on the rule's tokens `deps`. */
export interface Question {
  readonly command: ReadonlyArray<string>
  readonly deps: ReadonlyArray<string>
}

const keyCommand = (command: string, key: string): ReadonlyArray<string> => {
  switch (command) {
    case "+hexists":
      return ["hexists", key, "probe"]
    case "+hincrby":
      return ["hincrby", key, "probe", "1"]
    case "+pexpire":
      return ["pexpire", key, "1"]
    case "+hget":
    case "+hdel":
      return [command.slice(1), key, "probe"]
    case "+hset":
      return ["hset", key, "probe", "1"]
    case "+set":
      return ["set", key, "1", "px", "1"]
    case "+decrby":
    case "+incrby":
    case "+lindex":
      return [command.slice(1), key, "0"]
    case "+lpos":
    case "+rpush":
    case "+zrem":
    case "+zscore":
      return [command.slice(1), key, "probe"]
    case "+lrange":
    case "+zrange":
    case "+zrangebyscore":
      return [command.slice(1), key, "0", "-1"]
    case "+lrem":
      return ["lrem", key, "0", "probe"]
    case "+zadd":
    case "+zincrby":
      return [command.slice(1), key, "1", "probe"]
    default:
      return [command.slice(1), key]
  }
}

const channelCommand = (command: string, channel: string): ReadonlyArray<string> =>
  command === "+publish" || command === "+spublish"
    ? [command.slice(1), channel, "0"]
    : command === "+pubsub|numsub" || command === "+pubsub|shardnumsub"
    ? ["pubsub", command.slice("+pubsub|".length), channel]
    : [command.slice(1), channel]

/**
 * What the connections send on their own: ioredis' ready check (`INFO`) unless
 * `enableReadyCheck: false`, and `CLIENT SETNAME` when they have a `connectionName`; on a cluster
 * `CLUSTER SLOTS`, `READONLY`, and `CLUSTER INFO` as the cluster's ready check. Replica sync adds
 * `WAIT` (or `WAITAOF`) after each lock write.
 */
export interface ConnectionHabits {
  readonly readyCheck: boolean
  readonly connectionName: boolean
  /** A Redis Cluster, and whether the cluster client runs its ready check (`CLUSTER INFO`). */
  readonly cluster?: { readonly readyCheck: boolean } | undefined
  /** Replica sync: `"wait"` (`WAIT`) or `"aof"` (`WAITAOF`). */
  readonly replicas?: "wait" | "aof" | undefined
}

/** The questions for a backend with `prefix`. */
export const questionsFor = (prefix: string, habits: ConnectionHabits): ReadonlyArray<Question> => {
  const patterns = patternsOf(prefix)
  const layout = makeKeyLayout(prefix)
  const plainName = "effect-lock:acl-probe"
  const bracedName = "{effect-lock:acl-probe}"
  type Kind =
    | Exclude<keyof RedisKeys, "publish" | "numsub">
    | "channelKey"
    | "suffixed"
    | "rwChannelKey"
    | "rwChannel"
    | "permitToken"
    | "semChannelKey"
    | "semChannel"
    | "queue"
    | "fairTimeout"
  // A name with a `{` gets its companion keys as `kind:<name>` (the plain pattern), one without as
  // `kind:{<name>}` (the braced pattern), as Redisson names them.
  const pattern = (braced: boolean, kind: Kind): string => {
    if (prefix === "") {
      switch (kind) {
        case "channel":
          return "&redisson_lock__channel:*"
        case "rwChannel":
          return "&redisson_rwlock:*"
        case "semChannel":
          return "&redisson_sc:*"
        default:
          return "~*"
      }
    }
    switch (kind) {
      case "suffixed":
        return braced ? patterns.lock : patterns.suffixed
      case "rwChannelKey":
        return braced ? patterns.rwChannelKeyPlain : patterns.rwChannelKeyBraced
      case "rwChannel":
        return braced ? patterns.rwChannelPlain : patterns.rwChannelBraced
      case "permitToken":
        return braced ? patterns.permitTokenPlain : patterns.permitTokenBraced
      case "semChannelKey":
        return braced ? patterns.semChannelKeyPlain : patterns.semChannelKeyBraced
      case "semChannel":
        return braced ? patterns.semChannelPlain : patterns.semChannelBraced
      case "queue":
        return braced ? patterns.queuePlain : patterns.queueBraced
      case "fairTimeout":
        return braced ? patterns.fairTimeoutPlain : patterns.fairTimeoutBraced
      case "lock":
        return patterns.lock
      case "token":
        return braced ? patterns.tokenPlain : patterns.tokenBraced
      case "channelKey":
        return braced ? patterns.channelKeyPlain : patterns.channelKeyBraced
      case "channel":
        return braced ? patterns.channelPlain : patterns.channelBraced
    }
  }
  const cluster = habits.cluster
  const questions: Array<Question> = [
    ...(habits.readyCheck ? [{ command: ["info"], deps: ["+info"] }] : []),
    ...(habits.connectionName ? [{ command: ["client", "setname", "effect-lock"], deps: ["+client|setname"] }] : []),
    ...(cluster === undefined ? [] : [
      { command: ["cluster", "slots"], deps: ["+cluster|slots"] },
      ...(cluster.readyCheck ? [{ command: ["cluster", "info"], deps: ["+cluster|info"] }] : []),
      { command: ["readonly"], deps: ["+readonly"] }
    ]),
    { command: ["script", "load", "return 1"], deps: ["+script|load"] },
    { command: ["eval", "return 1", "0"], deps: ["+eval"] },
    { command: ["evalsha", checkPermissions.sha, "0"], deps: ["+evalsha"] },
    { command: ["time"], deps: ["+time"] },
    ...(habits.replicas === undefined ? [] : [{ command: ["wait", "0", "0"], deps: ["+wait"] }]),
    ...(habits.replicas === "aof" ? [{ command: ["waitaof", "0", "0", "0"], deps: ["+waitaof"] }] : [])
  ]
  const sharded = cluster !== undefined
  const subscribe = sharded ? "+ssubscribe" : "+subscribe"
  const publish = sharded ? "+spublish" : "+publish"
  for (const name of [plainName, bracedName]) {
    const braced = name === bracedName
    const keys = layout.keysOf(name)
    const rw = readWriteKeysOf(prefix, name)
    const semaphore = layout.semaphoreKeysOf(name)
    const fair = fairKeysOf(prefix, name)
    const keyKinds = [
      [keys.lock, pattern(braced, "lock")],
      [keys.token, pattern(braced, "token")],
      [keys.channel, pattern(braced, "channelKey")],
      [`${timeoutPrefix(rw, "probe")}:1`, pattern(braced, "suffixed")],
      [rw.channel, pattern(braced, "rwChannelKey")],
      [semaphore.timeouts, pattern(braced, "suffixed")],
      [semaphore.token, pattern(braced, "permitToken")],
      [semaphore.channel, pattern(braced, "semChannelKey")],
      [fair.queue, pattern(braced, "queue")],
      [fair.timeouts, pattern(braced, "fairTimeout")]
    ] as const
    for (const command of keyCommands) {
      for (const [key, keyPattern] of keyKinds) {
        questions.push({ command: keyCommand(command, key), deps: [command, keyPattern] })
      }
    }
    const pubsubCommands = sharded
      ? [...shardedSubscriberCommands, ...shardedChannelCommands]
      : [...subscriberCommands, ...channelCommands]
    for (const command of pubsubCommands) {
      // Redis checks the channel of (S)SUBSCRIBE and (S)PUBLISH against the user's channel patterns;
      // (S)UNSUBSCRIBE and PUBSUB (SHARD)NUMSUB only need the command.
      const deps = command === subscribe || command === publish
        ? [command, pattern(braced, "channel")]
        : [command]
      questions.push({ command: channelCommand(command, keys.channel), deps })
      if (command === subscribe || command === publish) {
        questions.push({ command: channelCommand(command, rw.channel), deps: [command, pattern(braced, "rwChannel")] })
        questions.push({
          command: channelCommand(command, semaphore.channel),
          deps: [command, pattern(braced, "semChannel")]
        })
        // A fair lock's waiter is told on a channel of its own, under the lock's channel.
        questions.push({ command: channelCommand(command, ownerChannel(fair, "probe")), deps })
      }
    }
  }
  return questions
}

/**
 * What the user lacks, from Redis' answers: each entry a rule token, or a sentence when the
 * answers cannot tell which token it is. Empty when nothing is missing or nothing was checked.
 */
export const missingPermissions = (
  questions: ReadonlyArray<Question>,
  answers: ReadonlyArray<number>
): ReadonlyArray<string> => {
  if (answers.length !== questions.length) return []
  const proven = new Set<string>()
  questions.forEach((q, i) => {
    if (answers[i] === 1) { for (const dep of q.deps) proven.add(dep) }
  })
  const missing = new Set<string>()
  questions.forEach((q, i) => {
    if (answers[i] !== 0) return
    const unproven = q.deps.filter((dep) => !proven.has(dep))
    if (unproven.length > 1) missing.add(`one of ${unproven.join(" ")}`)
    else if (unproven.length === 1) missing.add(unproven.join(""))
    else missing.add(`the right to run "${q.command.join(" ")}"`)
  })
  return Array.from(missing)
}
