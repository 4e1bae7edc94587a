/** The shape of one bench run, as the report reads it. */
import type { ClusterResult } from "./scenarios/cluster.js"
import type { DistinctResult } from "./scenarios/distinct.js"
import type { FairHandoffResult } from "./scenarios/fairHandoff.js"
import type { HandoffResult } from "./scenarios/handoff.js"
import type { MemoryResult } from "./scenarios/memory.js"
import type { PromiseResult } from "./scenarios/promise.js"
import type { RawResult } from "./scenarios/raw.js"
import type { ReadHeavyResult } from "./scenarios/readHeavy.js"
import type { RedlockResult } from "./scenarios/redlock.js"
import type { ReentrantResult } from "./scenarios/reentrant.js"
import type { ReplicaSyncResult } from "./scenarios/replicaSync.js"
import type { ScaleResult } from "./scenarios/scale.js"
import type { SemaphoreResult } from "./scenarios/semaphore.js"
import type { SerialResult } from "./scenarios/serial.js"
import type { WaitersResult } from "./scenarios/waiters.js"

/** A scenario that could not finish for a library, and why. */
export interface Failed {
  readonly library: string
  readonly error: string
}

export type Outcome<A> = A | Failed

export const isFailed = <A>(outcome: Outcome<A>): outcome is Failed =>
  typeof outcome === "object" && outcome !== null && "error" in outcome

export interface Machine {
  readonly cpu: string
  readonly cores: number
  readonly memoryGiB: number
  readonly os: string
  readonly node: string
  readonly redis: string
  /** 1-minute load average when the run started and when it ended. */
  readonly loadAverage: readonly [number, number]
}

export interface LibraryInfo {
  readonly name: string
  readonly version: string
  readonly usage: string
  readonly waiting: string
  readonly reentrant: boolean
}

export interface BenchResults {
  readonly date: string
  readonly command: string
  /** The effect-lock commit measured, with "+ local changes" when src/ or lua/ differ from it. */
  readonly revision: string
  readonly seconds: number
  readonly scale: number
  readonly machine: Machine
  readonly libraries: ReadonlyArray<LibraryInfo>
  readonly raw: Outcome<RawResult> | undefined
  readonly serial: ReadonlyArray<Outcome<SerialResult>>
  readonly distinct: ReadonlyArray<Outcome<DistinctResult>>
  readonly handoff: ReadonlyArray<Outcome<HandoffResult>>
  readonly waiters: ReadonlyArray<Outcome<WaitersResult>>
  readonly reentrant: ReadonlyArray<Outcome<ReentrantResult>>
  /** Promise-land callers (optional: runs before it was added have none). */
  readonly promise?: ReadonlyArray<Outcome<PromiseResult>> | undefined
  readonly memory?: Outcome<MemoryResult> | undefined
  /** 10,000 holds and 10,000 waiters in one process. */
  readonly atScale?: Outcome<ScaleResult> | undefined
  /** 16 readers and 1 writer on one key: ReadWriteLock next to the mutex. */
  readonly readHeavy?: ReadonlyArray<Outcome<ReadHeavyResult>> | undefined
  /** The hand-off scenario with FairLock next to the mutex. */
  readonly fairHandoff?: ReadonlyArray<Outcome<FairHandoffResult>> | undefined
  /** Serial acquire + release on a master with a replica, replica sync off and on. */
  readonly replicaSync?: Outcome<ReplicaSyncResult> | undefined
  /** 64 fibers sharing 8 permits of one semaphore, every library's semaphore. */
  readonly semaphore?: ReadonlyArray<SemaphoreResult> | undefined
  /** 64 fibers on distinct keys on a 3-master Redis Cluster (optional: older runs have none). */
  readonly cluster?: ReadonlyArray<Outcome<ClusterResult>> | undefined
  /** Redlock on 3 and 5 servers: effect-lock's RedlockBackend next to redlock and RedlockMutex. */
  readonly redlock?: ReadonlyArray<Outcome<RedlockResult>> | undefined
  /** Errors outside any measured call (ioredis error events, stragglers) and unhandled rejections. */
  readonly backgroundErrors: ReadonlyArray<string>
  readonly unhandledRejections: ReadonlyArray<string>
}
