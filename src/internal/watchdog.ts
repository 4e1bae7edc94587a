/**
 * The watchdog. Every hold is watched: its lease is renewed every `renew` period with an
 * owner-checked call, and the hold is declared lost when a renewal finds another owner or no lock,
 * or when the local deadline passes without a confirmed renewal. With `renew: false` the hold is
 * only watched for its deadline.
 *
 * One timer fiber per clock serves every hold: a hold joins a timer heap when acquired and leaves
 * it when released, both synchronous, so an uncontended lock costs no fiber start or interrupt.
 * A due renewal runs in a fiber of its own, so a slow backend call for one lock never delays
 * another's. The timer fiber sleeps through `Clock`, so `TestClock` drives it.
 */
import { Clock, Deferred, Effect, Exit, Fiber, FiberId, FiberRef, HashMap, List, Metric } from "effect"
import { globalValue } from "effect/GlobalValue"
import type { LockRequest } from "../LockBackend.js"
import type { Hold } from "./hold.js"
import { markLost } from "./hold.js"
import * as metrics from "./metrics.js"
import { nowMillis, wholeMillis } from "./time.js"
import type { Timer } from "./timerHeap.js"
import { TimerHeap } from "./timerHeap.js"

interface Watch extends Timer {
  readonly hold: Hold
  readonly ticker: Ticker
  readonly request: LockRequest
  /** A renewal call in flight, if any (the watch is out of the heap meanwhile). */
  renewal: Fiber.RuntimeFiber<void> | undefined
  lastError: unknown
  stopped: boolean
}

interface Ticker {
  readonly heap: TimerHeap<Watch>
  /** When the timer fiber will next wake up by itself (Infinity: only when woken). */
  target: number
  wake: Deferred.Deferred<void> | undefined
}

const tickers = globalValue(Symbol.for("effect-lock/watchdogTickers"), () => new WeakMap<Clock.Clock, Ticker>())

const schedule = (watch: Watch, due: number): void => {
  if (watch.stopped) return
  const { ticker } = watch
  watch.due = due
  ticker.heap.push(watch)
  if (due < ticker.target) {
    ticker.target = due
    const wake = ticker.wake
    ticker.wake = undefined
    if (wake !== undefined) Deferred.unsafeDone(wake, Exit.void)
  }
}

const stop = (watch: Watch): void => {
  if (watch.stopped) return
  watch.stopped = true
  metrics.watchdogs.active--
  watch.ticker.heap.remove(watch)
  watch.renewal?.unsafeInterruptAsFork(FiberId.none)
  watch.renewal = undefined
}

/** After a failed renewal, retry soon: a third of the period, between 10 ms and 1 s. */
const retryMillis = (hold: Hold) => Math.min(1000, Math.max(10, Math.floor(hold.options.renewMillis / 3)))

const lose = (watch: Watch, reason: "stolen" | "expired" | "renewal-failed", cause?: unknown) =>
  Effect.suspend(() => {
    stop(watch)
    return markLost(watch.hold, reason, cause)
  })

/** One renewal: extend the lease, or find out it is gone. Runs in its own fiber. */
const renew = (watch: Watch): Effect.Effect<void> =>
  Effect.gen(function*() {
    const { hold } = watch
    const startedAt = yield* nowMillis
    const result = yield* hold.backend.renew(watch.request).pipe(
      Effect.timeoutOption(wholeMillis(hold.deadline - startedAt)),
      Effect.either
    )
    watch.renewal = undefined
    if (watch.stopped || hold.state !== "held") return
    if (result._tag === "Left") {
      watch.lastError = result.left
      yield* Effect.logDebug("Lease renewal failed; retrying until the local deadline", result.left).pipe(
        Effect.annotateLogs({ key: hold.key, owner: hold.owner.id })
      )
      const now = yield* nowMillis
      return schedule(watch, Math.min(now + retryMillis(hold), hold.deadline))
    }
    // The call outlived the deadline: the lease can no longer be trusted.
    if (result.right._tag === "None") {
      return yield* lose(
        watch,
        "renewal-failed",
        watch.lastError ?? new Error("the renewal got no reply before the local deadline")
      )
    }
    // Another owner, or no lock at all although this call started before our deadline (so the
    // server-side lease cannot have run out): somebody took or deleted it (force-unlock, flush,
    // failover). For the program both mean the lock was taken from it.
    if (result.right.value._tag === "Lost") return yield* lose(watch, "stolen")
    watch.lastError = undefined
    hold.deadline = startedAt + hold.options.leaseMillis - hold.options.driftMillis
    yield* Metric.increment(metrics.renewals)
    // Renew on the period, but never later than the deadline (a renew period close to the lease).
    schedule(watch, Math.min(startedAt + hold.options.renewMillis, hold.deadline))
  })

/** A watch came due: renew it, or, past its deadline, declare the hold lost. */
const fire = (watch: Watch, now: number): Effect.Effect<void> => {
  const { hold } = watch
  if (watch.stopped) return Effect.void
  if (now >= hold.deadline) {
    // Past the deadline with no failed call: renewal is off, or the process did not get to renew
    // in time (paused, starved); with failed calls: the backend could not confirm a renewal.
    return lose(watch, watch.lastError === undefined ? "expired" : "renewal-failed", watch.lastError)
  }
  return Effect.map(Effect.forkDaemon(renew(watch)), (fiber) => {
    if (watch.stopped) fiber.unsafeInterruptAsFork(FiberId.none)
    else watch.renewal = fiber
  })
}

/** The timer fiber: run what is due, then sleep until the next due time or a wake-up. */
const tick = (ticker: Ticker): Effect.Effect<never> =>
  Effect.forever(Effect.gen(function*() {
    const now = yield* nowMillis
    let next = ticker.heap.peek()
    while (next !== undefined && next.due <= now) {
      ticker.heap.pop()
      yield* fire(next, now)
      next = ticker.heap.peek()
    }
    const wake = Deferred.unsafeMake<void>(FiberId.none)
    ticker.wake = wake
    ticker.target = next === undefined ? Infinity : next.due
    if (next === undefined) yield* Deferred.await(wake)
    else yield* Effect.timeoutOption(Deferred.await(wake), wholeMillis(next.due - now))
  }))

const tickerFor = (clock: Clock.Clock): Effect.Effect<Ticker> =>
  Effect.suspend(() => {
    const existing = tickers.get(clock)
    if (existing !== undefined) return Effect.succeed(existing)
    const ticker: Ticker = { heap: new TimerHeap(), target: -Infinity, wake: undefined }
    tickers.set(clock, ticker)
    // The timer fiber outlives whichever fiber happened to start it: it must not carry that
    // fiber's log annotations and spans into every later renewal's logs.
    const detached = tick(ticker).pipe(
      Effect.interruptible,
      Effect.locally(FiberRef.currentLogAnnotations, HashMap.empty()),
      Effect.locally(FiberRef.currentLogSpan, List.empty())
    )
    return Effect.as(Effect.forkDaemon(detached), ticker)
  })

/**
 * Watch `hold` until it is released (`hold.watchdog.stop()`) or lost. Synchronous apart from the
 * first use of a clock, which starts that clock's timer fiber.
 */
export const startWatchdog = (hold: Hold): Effect.Effect<void> =>
  Effect.clockWith((clock) =>
    Effect.map(tickerFor(clock), (ticker) => {
      const watch: Watch = {
        hold,
        ticker,
        request: { key: hold.key, owner: hold.owner.id, leaseMillis: hold.options.leaseMillis, fencing: hold.options.fencing },
        due: 0,
        index: -1,
        renewal: undefined,
        lastError: undefined,
        stopped: false
      }
      metrics.watchdogs.active++
      hold.watchdog = { stop: () => stop(watch) }
      const renewing = hold.options.renewMillis > 0
      schedule(watch, renewing ? Math.min(hold.acquiredAt + hold.options.renewMillis, hold.deadline) : hold.deadline)
    })
  )
