/**
 * One write per batch of commands. Fibers resumed together (say, by one socket read that carried
 * many replies) issue their next commands in the same turn of the microtask queue; writing each
 * at once costs a system call apiece, which dominated the CPU profile of many concurrent locks.
 * Corking the socket on the first command of a turn and uncorking it in a microtask sends them all
 * with one `writev`, in order, without holding a lone command back by more than a microtask
 * (unlike ioredis' auto-pipelining, which waits for the next tick and builds a pipeline).
 */
import type { Cluster, Redis } from "ioredis"

/** Returns `batch`, to call right before each command written on `redis`. */
export const makeWriteBatcher = (redis: Redis): () => void => {
  let corked: Redis["stream"] | undefined
  const uncork = () => {
    const stream = corked
    corked = undefined
    stream?.uncork()
  }
  return () => {
    if (corked !== undefined) return
    const stream = redis.stream
    // Only a live socket: while (re)connecting ioredis keeps commands itself.
    if (stream === undefined || stream === null || !stream.writable) return
    stream.cork()
    corked = stream
    queueMicrotask(uncork)
  }
}

/**
 * `makeWriteBatcher` for a cluster client: the first command of a turn corks every master's socket
 * (the command cluster writes only to masters, each command to its slot's), and a microtask
 * uncorks them, so each master gets one write per turn however many commands it was sent.
 */
export const makeClusterWriteBatcher = (cluster: Cluster): () => void => {
  let corked: Array<Redis["stream"]> = []
  let pending = false
  const uncork = () => {
    const streams = corked
    corked = []
    pending = false
    for (const stream of streams) stream.uncork()
  }
  return () => {
    if (pending) return
    pending = true
    for (const node of cluster.nodes("master")) {
      const stream = node.stream
      // Only live sockets: a node (re)connecting keeps its commands itself.
      if (stream === undefined || stream === null || !stream.writable) continue
      stream.cork()
      corked.push(stream)
    }
    queueMicrotask(uncork)
  }
}
