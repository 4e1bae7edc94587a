/**
 * The nemesis: carries out the schedule's faults on the campaign's processes, servers and proxies,
 * one at a time, recording when each began and when it was healed.
 */
import type { Redis } from "ioredis"
import type { RedisServer } from "../test/support/redisServer.js"
import type { TcpProxy } from "../test/support/tcpProxy.js"
import type { HistoryRecord } from "./history.js"
import type { Fault } from "./schedule.js"

/** What the nemesis can act on, given by the campaign. */
export interface Targets {
  readonly servers: ReadonlyArray<RedisServer>
  /** An admin connection per server, direct (not through a proxy). */
  readonly admins: ReadonlyArray<Redis>
  /** `proxies[w]`: worker w's proxies, one per server. */
  readonly proxies: ReadonlyArray<ReadonlyArray<TcpProxy>>
  /** The worker holding the lock now, if any. */
  readonly holder: () => number | undefined
  /**
   * The next worker to finish reading the resources under the lock (it is now between its read
   * and its write), waiting up to `ms`; undefined if none did.
   */
  readonly nextReader: (ms: number) => Promise<number | undefined>
  readonly signal: (w: number, signal: NodeJS.Signals) => void
  /** kill -9 the worker and wait until it is gone. */
  readonly kill: (w: number) => Promise<void>
  /** Start the worker again. */
  readonly respawn: (w: number) => Promise<void>
  readonly record: (record: HistoryRecord) => void
  readonly mono: () => number
}

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

const describe = (fault: Fault): string =>
  fault.kind === "proxy-latency"
    ? `${fault.latency} ms for ${fault.duration} ms`
    : fault.duration > 0
    ? `${fault.duration} ms`
    : ""

/** Run one fault from start to heal. */
export const inflict = async (fault: Fault, targets: Targets): Promise<void> => {
  // A holder is paused right after it read (the window a stale write comes from); killed wherever it is.
  const holder = fault.target !== "holder"
    ? undefined
    : fault.kind === "pause-worker"
    ? (await targets.nextReader(1000)) ?? targets.holder()
    : targets.holder()
  const worker = fault.target === "holder" ? (holder ?? fault.index % targets.proxies.length) : fault.target
  const w = typeof worker === "number" ? worker : -1
  const begin = () =>
    targets.record({
      t: "fault",
      fault: fault.index,
      kind: fault.kind,
      target: w >= 0 ? `w${w}` : "redis",
      detail: describe(fault),
      mono: targets.mono()
    })
  const healed = () => targets.record({ t: "healed", fault: fault.index, kind: fault.kind, mono: targets.mono() })
  const servers = targets.servers
  switch (fault.kind) {
    case "pause-worker":
      begin()
      targets.signal(w, "SIGSTOP")
      await sleep(fault.duration)
      targets.signal(w, "SIGCONT")
      break
    case "kill-worker":
      begin()
      await targets.kill(w)
      await sleep(fault.duration)
      await targets.respawn(w)
      break
    case "restart-redis":
      begin()
      for (const server of servers) server.kill("SIGKILL")
      await sleep(fault.duration)
      await Promise.all(servers.map((server) => server.restart()))
      break
    case "pause-redis":
      begin()
      await Promise.all(
        targets.admins.map((admin) => admin.call("CLIENT", "PAUSE", String(fault.duration), "ALL").catch(() => {}))
      )
      await sleep(fault.duration)
      await Promise.all(targets.admins.map((admin) => admin.call("CLIENT", "UNPAUSE").catch(() => {})))
      break
    case "stop-redis":
      begin()
      for (const server of servers) server.pause()
      await sleep(fault.duration)
      for (const server of servers) server.resume()
      break
    case "client-kill":
      begin()
      await Promise.all(targets.admins.flatMap((admin) => [
        admin.call("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes").catch(() => {}),
        admin.call("CLIENT", "KILL", "TYPE", "pubsub", "SKIPME", "yes").catch(() => {})
      ]))
      break
    case "proxy-latency":
    case "proxy-drop":
    case "proxy-half-open": {
      const proxies = targets.proxies[w] ?? []
      begin()
      for (const proxy of proxies) {
        if (fault.kind === "proxy-latency") proxy.latency(fault.latency ?? 100)
        else if (fault.kind === "proxy-drop") proxy.drop()
        else proxy.halfOpen()
      }
      await sleep(fault.duration)
      for (const proxy of proxies) proxy.heal()
      break
    }
  }
  healed()
}
