/**
 * Which commands the libraries send, counted where ioredis writes them (every client in the
 * process, admin connections excluded). `INFO commandstats` also counts the calls a Lua script
 * makes (`redis.call`), so the server's numbers alone cannot tell a client's round trips from a
 * script's inner work: the names seen here pick out the client-issued ones, and the server's
 * counts for those names are what the report uses (this count is the cross-check).
 */
import { Redis } from "ioredis"
import { adminName } from "./redis.js"

/** Commands whose first argument is a subcommand, named `name|sub` by `INFO commandstats`. */
const containers = new Set([
  "acl",
  "client",
  "cluster",
  "command",
  "config",
  "debug",
  "function",
  "latency",
  "memory",
  "module",
  "object",
  "pubsub",
  "script",
  "slowlog",
  "xinfo"
])

interface WrittenCommand {
  readonly name: string
  readonly args: ReadonlyArray<unknown>
  isTraced?: boolean
}

export const commandStatName = (name: string, args: ReadonlyArray<unknown>): string => {
  const lower = name.toLowerCase()
  const first = args[0]
  return containers.has(lower) && (typeof first === "string" || Buffer.isBuffer(first))
    ? `${lower}|${String(first).toLowerCase()}`
    : lower
}

const counts = new Map<string, number>()
let installed = false

/** Start counting written commands (idempotent). */
export const installCommandCounter = (): void => {
  if (installed) return
  installed = true
  const proto = Redis.prototype as unknown as {
    sendCommand: (this: Redis, command: WrittenCommand, stream?: unknown) => unknown
  }
  const original = proto.sendCommand
  proto.sendCommand = function(command, stream) {
    // ioredis marks a command `isTraced` the first time it is written; a command re-sent from the
    // offline queue passes here again and must be counted once.
    const before = command.isTraced === true
    const result = original.call(this, command, stream)
    if (!before && command.isTraced === true && this.options.connectionName !== adminName) {
      const name = commandStatName(command.name, command.args)
      counts.set(name, (counts.get(name) ?? 0) + 1)
    }
    return result
  }
}

export const snapshotClientCommands = (): Map<string, number> => new Map(counts)
