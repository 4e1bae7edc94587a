/**
 * `LockBackend.make`: what every backend shares, built once around its primitives and owned by the
 * scope it is built in (the backend layer's). Locks talk to this, never to the primitives:
 *
 * - `queue`: the local wait queues (wake-one, FIFO, promotion of the head), subscribed to the
 *   backend's notifications for exactly as long as a key has local waiters;
 * - `release`: an owner-checked release that hands the lock to a parked local waiter when the
 *   backend can do that in the same call;
 * - `renewals`: the renewal scheduler (`renewals.ts`): renewals due at the same instant go out
 *   together, 100 to a `primitives.renew` call;
 * - `kinds`: the same machinery built for each lock kind the backend offers (`LockKinds`), so a
 *   fair lock or a read lock has waiters, holds and renewals of its own;
 * - shutdown: when the scope closes, acquisitions start failing, waiters are woken (to fail), the
 *   programs holding locks are interrupted and their locks released, all within
 *   `SHUTDOWN_TIMEOUT_MILLIS`, before anything the backend needs (connections) closes.
 */
import type { Scope } from "effect"
import type { MetricLabel as MetricLabelType, Tracer } from "effect"
import { Deferred, Effect, Exit, FiberId, MetricLabel, Option, Queue } from "effect"
import type {
  LockBackendShape,
  LockPrimitives,
  LockRequest,
  ReleaseResult,
  TypeId as LockBackendTypeId
} from "../../LockBackend.js"
import { LockBackendError } from "../../LockError.js"
import type { KindName, KindPrimitives } from "../../LockKinds.js"
import type { Hold } from "../lock/hold.js"
import { stopHolds } from "../lock/shutdown.js"
import * as metrics from "../metrics.js"
import { semaphoreKeyOf } from "../semaphore/primitives.js"
import type { SemaphoreSupport } from "../semaphore/support.js"
import { makeSemaphoreSupport, makeView } from "../semaphore/support.js"
import { releaseHandingOver } from "../waiting/handOver.js"
import type { WaiterQueue } from "../waiting/waiterQueue.js"
import { makeWaiterQueue } from "../waiting/waiterQueue.js"
import type { Renewals } from "./renewals.js"
import { makeRenewals } from "./renewals.js"

export const TypeId: LockBackendTypeId = Symbol.for("effect-lock/LockBackend") as LockBackendTypeId

/** The service as the lock code sees it. Every `LockBackendShape` is one: only `make` builds them. */
export interface Backend extends LockBackendShape {
  /** The holds this backend serves, from their acquisition until their release is done. */
  readonly holds: Set<Hold>
  /** Whether the backend's scope is closing: from then on acquisitions fail. */
  readonly isClosing: () => boolean
  /** A hold's release is done: forget it (the shutdown waits for every hold to be forgotten). */
  readonly forget: (hold: Hold) => void
  /** The metric labels of this backend: `backend=<name>`. */
  readonly labels: ReadonlyArray<MetricLabelType.MetricLabel>
  readonly queue: WaiterQueue
  readonly renewals: Renewals
  /** Semaphores: present when the primitives have them (`primitives.semaphore`). */
  readonly semaphores: SemaphoreSupport | undefined
  /**
   * Release one hold, handing the lock to a local waiter where the backend can (`span`: the
   * releasing hold's, which a traced hand-over links to).
   */
  readonly release: (
    key: string,
    owner: string,
    span?: Tracer.AnySpan | undefined
  ) => Effect.Effect<ReleaseResult, LockBackendError>
  /** A waiter left without the lock: tell the backend (a kind's `abandon`), logging a failure. */
  readonly abandon: ((request: LockRequest) => Effect.Effect<void>) | undefined
  /** The machinery built for each lock kind the backend offers. */
  readonly kinds: { readonly [K in KindName]?: Backend }
  /**
   * Whether holders of this kind may share the lock (the read side of a read-write lock): a waiter
   * that gets in then wakes the next local waiter, which may get in beside it.
   */
  readonly shared: boolean
}

export const backendOf = (service: LockBackendShape): Backend => service as Backend

const kindNames: Record<KindName, string> = { fair: "fair locks", read: "read-write locks", write: "read-write locks" }

/** The machinery of lock kind `kind` on `backend`, or a `LockBackendError` saying it has none. */
export const kindOf = (backend: Backend, kind: KindName, key: string): Backend | LockBackendError =>
  backend.kinds[kind] ?? new LockBackendError({
    backend: backend.name,
    operation: "acquire",
    key,
    cause: new Error(`the ${backend.name} backend does not support ${kindNames[kind]}`)
  })

export const make = (primitives: LockPrimitives, shared = false): Effect.Effect<LockBackendShape, never, Scope.Scope> =>
  Effect.gen(function*() {
    // Each kind's machinery first: its shutdown finaliser then runs after the mutex's.
    const kinds: { [K in KindName]?: Backend } = {}
    for (
      const [name, kind] of Object.entries(primitives.kinds ?? {}) as Array<[KindName, KindPrimitives | undefined]>
    ) {
      if (kind !== undefined) kinds[name] = backendOf(yield* make(kind, name === "read"))
    }
    const logged = (what: string) => (effect: Effect.Effect<unknown, LockBackendError>) =>
      Effect.catchAll(
        Effect.asVoid(effect),
        (error) =>
          Effect.logWarning(`${what} failed; its lease will end on its own`, error).pipe(
            Effect.annotateLogs({ backend: primitives.name })
          )
      )
    const labels = [MetricLabel.make("backend", primitives.name)]
    const queue: WaiterQueue = makeWaiterQueue({
      onCount: (delta) => metrics.count(metrics.waiters, labels, delta),
      onFirst: primitives.subscribe,
      onLast: primitives.unsubscribe,
      onOrphan: (request) =>
        releaseHandingOver(queue, primitives, labels, request.key, request.owner).pipe(
          logged(`Releasing lock "${request.key}" handed to a waiter that was interrupted`)
        )
    })
    const semaphores = primitives.semaphore === undefined
      ? undefined
      : yield* makeSemaphoreSupport(primitives, primitives.semaphore, labels)
    const deliver = Effect.flatMap(
      Queue.takeBetween(primitives.notifications, 1, Number.POSITIVE_INFINITY),
      (batch) =>
        Effect.sync(() => {
          for (const notification of batch) {
            if (notification._tag === "Released") {
              const semaphore = semaphoreKeyOf(notification.key)
              if (semaphore === undefined) queue.notify(notification.key)
              else semaphores?.queue.notify(semaphore)
            } else {
              queue.notifyEveryKey()
              semaphores?.queue.notifyEveryKey()
            }
          }
        })
    )
    yield* Effect.forkScoped(Effect.interruptible(Effect.forever(deliver)))
    const renewals = yield* makeRenewals(primitives, labels)
    const holds = new Set<Hold>()
    let closing = false
    const drained = Deferred.unsafeMake<void>(FiberId.none)
    const backend: Backend = {
      [TypeId]: TypeId,
      name: primitives.name,
      labels,
      primitives,
      queue,
      renewals,
      semaphores,
      holds,
      isClosing: () => closing,
      forget: (hold) => {
        holds.delete(hold)
        if (closing && holds.size === 0) Deferred.unsafeDone(drained, Exit.void)
      },
      release: (key, owner, span) => releaseHandingOver(queue, primitives, labels, key, owner, span),
      abandon: abandonOf(primitives, logged),
      kinds,
      shared
    }
    if (semaphores !== undefined) semaphores.view = makeView(backend, semaphores)
    // Registered last, so it runs first when the scope closes: the holds are released while the
    // backend (its connections, its timers) still works, then everything else closes.
    yield* Effect.addFinalizer(() =>
      Effect.suspend(() => {
        closing = true
        queue.wakeEveryone()
        semaphores?.queue.wakeEveryone()
        if (holds.size === 0) return Effect.void
        const pending = holds.size
        return stopHolds(holds).pipe(
          Effect.zipRight(Deferred.await(drained)),
          // A finaliser runs uninterruptibly, where the timeout could not stop a release that never
          // completes (the backend's close then hung for good): the wait is made interruptible.
          Effect.interruptible,
          Effect.timeoutOption(SHUTDOWN_TIMEOUT_MILLIS),
          Effect.flatMap((done) =>
            Option.isSome(done) ?
              Effect.logDebug(`Released ${pending} lock(s) while shutting down`) :
              Effect.logWarning(
                `${holds.size} lock(s) were not released within ${SHUTDOWN_TIMEOUT_MILLIS} ms of shutting down; ` +
                  "their leases will end on their own"
              )
          ),
          Effect.annotateLogs({ backend: primitives.name })
        )
      })
    )
    return backend
  })

const abandonOf = (
  primitives: LockPrimitives & { readonly abandon?: KindPrimitives["abandon"] },
  logged: (what: string) => (effect: Effect.Effect<unknown, LockBackendError>) => Effect.Effect<void>
) => {
  const abandon = primitives.abandon
  return abandon === undefined ?
    undefined :
    (request: LockRequest) => abandon(request).pipe(logged(`Leaving the queue of lock "${request.key}"`))
}

/** How long closing a backend waits for the releases of the holds it serves. */
export const SHUTDOWN_TIMEOUT_MILLIS = 5_000
