/**
 * What `RedisBackend.layerConfig` reads from `Config` (by default the environment):
 * `REDIS_CLUSTER_NODES`, a Redis Cluster's startup nodes; `REDIS_SENTINELS` and
 * `REDIS_SENTINEL_NAME`, a master found through Redis Sentinel; or `REDIS_URL`.
 */
import { Config, ConfigError, Either, Option, Redacted } from "effect"

export interface NodeAddress {
  readonly host: string
  readonly port: number
}

const parseNode = (entry: string): NodeAddress | undefined => {
  // host:port, with an IPv6 host in brackets ([::1]:7000).
  const match = /^(?:\[([^\]]+)\]|([^:[\]]+)):(\d{1,5})$/.exec(entry)
  if (match === null) return undefined
  const port = Number(match[3])
  if (port < 1 || port > 65535) return undefined
  return { host: match[1] ?? match[2] ?? "", port }
}

/** `host:port` entries separated by commas (spaces around them allowed); at least one. */
export const parseNodes = (text: string): Either.Either<ReadonlyArray<NodeAddress>, string> => {
  const entries = text.split(",").map((entry) => entry.trim()).filter((entry) => entry !== "")
  if (entries.length === 0) return Either.left("lists no node; expected host:port entries separated by commas")
  const nodes: Array<NodeAddress> = []
  for (const entry of entries) {
    const node = parseNode(entry)
    if (node === undefined) {
      return Either.left(`has "${entry}", which is not host:port (e.g. 10.0.0.1:7000 or [::1]:7000)`)
    }
    nodes.push(node)
  }
  return Either.right(nodes)
}

/** `REDIS_CLUSTER_NODES`, when set: the cluster's startup nodes. */
export const clusterNodes = Config.option(
  Config.string("REDIS_CLUSTER_NODES").pipe(
    Config.mapOrFail((text) =>
      Either.mapLeft(
        parseNodes(text),
        (reason) => ConfigError.InvalidData(["REDIS_CLUSTER_NODES"], `REDIS_CLUSTER_NODES ${reason}`)
      )
    ),
    Config.withDescription("a Redis Cluster's startup nodes, e.g. 10.0.0.1:7000,10.0.0.2:7000")
  )
)

// Read as a string and wrapped at once: `Config.redacted` would also redact the error of a missing
// variable ("Missing data at REDIS_URL: <redacted>"), which holds no secret and should say what is
// missing. The value itself is Redacted from here on.
export const redisUrl = Config.string("REDIS_URL").pipe(
  Config.map(Redacted.make),
  Config.withDescription("the Redis URL, e.g. redis://127.0.0.1:6379 or rediss://user:password@host:6380")
)

/** What `REDIS_SENTINELS` and `REDIS_SENTINEL_NAME` give: ioredis' `sentinels` and `name`. */
export interface SentinelTarget {
  readonly sentinels: ReadonlyArray<NodeAddress>
  readonly name: string
}

/**
 * `REDIS_SENTINELS` (the sentinels, `host:port` separated by commas) and, when it is set,
 * `REDIS_SENTINEL_NAME` (the master's name as the sentinels know it), which is then required.
 * `None` when `REDIS_SENTINELS` is not set.
 */
export const sentinelTarget: Config.Config<Option.Option<SentinelTarget>> = Config.all({
  sentinels: Config.option(
    Config.string("REDIS_SENTINELS").pipe(
      Config.mapOrFail((text) =>
        Either.mapLeft(
          parseNodes(text),
          // The examples of `parseNodes` name cluster ports; a sentinel's is 26379.
          (reason) =>
            ConfigError.InvalidData(["REDIS_SENTINELS"], `REDIS_SENTINELS ${reason.replace(/7000/g, "26379")}`)
        )
      ),
      Config.withDescription("the Redis Sentinels, e.g. 10.0.0.1:26379,10.0.0.2:26379,10.0.0.3:26379")
    )
  ),
  name: Config.option(
    Config.string("REDIS_SENTINEL_NAME").pipe(
      Config.withDescription("the name of the master the sentinels monitor, e.g. mymaster")
    )
  )
}).pipe(Config.mapOrFail(({ name, sentinels }) => {
  if (Option.isNone(sentinels)) return Either.right(Option.none())
  if (Option.isNone(name) || name.value.trim() === "") {
    return Either.left(ConfigError.MissingData(
      ["REDIS_SENTINEL_NAME"],
      "REDIS_SENTINEL_NAME (the master's name as the sentinels know it, e.g. mymaster) is required with REDIS_SENTINELS"
    ))
  }
  return Either.right(Option.some({ sentinels: sentinels.value, name: name.value }))
}))
