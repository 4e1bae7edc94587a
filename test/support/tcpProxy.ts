/**
 * A small loopback TCP proxy that degrades the network between a client and a server on command:
 *
 * - `latency(ms)`: every chunk, both ways, arrives `ms` later (order kept);
 * - `drop()`: every byte, both ways, is swallowed (a black hole: connections stay open and silent,
 *   new ones are accepted and go silent too);
 * - `halfOpen()`: the client's bytes reach the server, the server's replies are swallowed (the
 *   commands run, their answers never arrive);
 * - `heal()`: back to normal. Connections that lost bytes under `drop` or `halfOpen` are reset
 *   (their byte streams have holes, as a real half-open connection ends in a reset); the others,
 *   idle meanwhile, go on;
 * - `cut()`: reset every connection now.
 *
 * Plain promises, so that both Effect tests and the chaos runner can use it.
 */
import { connect, createServer, type Socket } from "node:net"

export interface TcpProxy {
  /** The proxy's port on 127.0.0.1. */
  readonly port: number
  readonly latency: (ms: number) => void
  readonly drop: () => void
  readonly halfOpen: () => void
  readonly heal: () => void
  readonly cut: () => void
  /** Stop listening and reset every connection. */
  readonly close: () => Promise<void>
  /** Connections currently open through the proxy. */
  readonly connections: () => number
}

type Mode =
  | { readonly _tag: "Normal" }
  | { readonly _tag: "Latency"; readonly ms: number }
  | { readonly _tag: "Drop" }
  | { readonly _tag: "HalfOpen" }

interface Pair {
  readonly client: Socket
  readonly upstream: Socket
  /** Lost bytes under drop/half-open: reset on heal. */
  tainted: boolean
}

/** Delivers chunks to `socket` no earlier than their due time, in order. */
const delayedWriter = (socket: Socket) => {
  const queue: Array<{ readonly due: number; readonly chunk: Buffer }> = []
  let timer: NodeJS.Timeout | undefined
  const pump = () => {
    timer = undefined
    const now = Date.now()
    while (queue.length > 0 && queue[0]!.due <= now) {
      const { chunk } = queue.shift()!
      if (!socket.destroyed) socket.write(chunk)
    }
    if (queue.length > 0) timer = setTimeout(pump, queue[0]!.due - now)
  }
  return {
    write: (chunk: Buffer, delay: number) => {
      if (delay <= 0 && queue.length === 0) {
        if (!socket.destroyed) socket.write(chunk)
        return
      }
      queue.push({ due: Date.now() + delay, chunk })
      if (timer === undefined) timer = setTimeout(pump, Math.max(0, queue[0]!.due - Date.now()))
    },
    stop: () => {
      if (timer !== undefined) clearTimeout(timer)
      queue.length = 0
    }
  }
}

/** Start a proxy on a free loopback port in front of `127.0.0.1:targetPort`. */
export const startTcpProxy = (targetPort: number): Promise<TcpProxy> =>
  new Promise((resolve, reject) => {
    let mode: Mode = { _tag: "Normal" }
    const pairs = new Set<Pair>()
    const server = createServer((client) => {
      const upstream = connect(targetPort, "127.0.0.1")
      const pair: Pair = { client, upstream, tainted: false }
      pairs.add(pair)
      const toUpstream = delayedWriter(upstream)
      const toClient = delayedWriter(client)
      const close = () => {
        pairs.delete(pair)
        toUpstream.stop()
        toClient.stop()
        client.destroy()
        upstream.destroy()
      }
      for (const socket of [client, upstream]) {
        socket.on("error", () => {})
        socket.on("close", close)
      }
      client.on("data", (chunk: Buffer) => {
        if (mode._tag === "Drop") {
          pair.tainted = true
          return
        }
        toUpstream.write(chunk, mode._tag === "Latency" ? mode.ms : 0)
      })
      upstream.on("data", (chunk: Buffer) => {
        if (mode._tag === "Drop" || mode._tag === "HalfOpen") {
          pair.tainted = true
          return
        }
        toClient.write(chunk, mode._tag === "Latency" ? mode.ms : 0)
      })
    })
    server.on("error", reject)
    server.listen(0, "127.0.0.1", () => {
      const address = server.address()
      const port = typeof address === "object" && address !== null ? address.port : 0
      const reset = (pair: Pair) => {
        pair.client.resetAndDestroy()
        pair.upstream.destroy()
      }
      resolve({
        port,
        latency: (ms) => {
          mode = { _tag: "Latency", ms }
        },
        drop: () => {
          mode = { _tag: "Drop" }
        },
        halfOpen: () => {
          mode = { _tag: "HalfOpen" }
        },
        heal: () => {
          mode = { _tag: "Normal" }
          for (const pair of [...pairs]) if (pair.tainted) reset(pair)
        },
        cut: () => {
          for (const pair of [...pairs]) reset(pair)
        },
        close: () =>
          new Promise<void>((done) => {
            for (const pair of [...pairs]) reset(pair)
            server.close(() => done())
          }),
        connections: () => pairs.size
      })
    })
  })
