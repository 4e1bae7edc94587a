/**
 * One write per batch of commands. Fibers resumed together (say, by one socket read that carried
 * many replies) issue their next commands in the same turn of the microtask queue; writing each
 * at once costs a system call apiece, which dominated the CPU profile of many concurrent locks.
 * Corking the socket on the first command of a turn and uncorking it in a microtask sends them all
 * with one `writev`, in order, without holding a lone command back by more than a microtask
 * (unlike ioredis' auto-pipelining, which waits for the next tick and builds a pipeline).
 */
import type { Redis } from "ioredis"

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
