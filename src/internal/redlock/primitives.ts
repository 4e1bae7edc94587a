/**
 * The Redlock primitives over N independent masters (the algorithm of https://redis.io/docs/latest/develop/use/patterns/distributed-locks/):
 *
 * - acquire: the acquire script on every node at once; held when a quorum (N/2+1) took it and the
 *   time left, lease - elapsed - drift, is positive. Otherwise it is released on the nodes that
 *   took it (and the calls still in flight are interrupted, which releases what they may take).
 * - fencing: the token is the largest of the quorum's counters, and every node's counter is then
 *   raised to it (`raise-token.lua`; not sent to a node that granted with that very token, whose
 *   counter stands there already), written before anything else this backend sends that node,
 *   so the next grant, whose quorum shares a node with this one, draws a larger token.
 * - renew: on every node; renewed when a quorum renewed. Lost when so many nodes answered "not
 *   yours" that a quorum is out of reach; otherwise a `LockBackendError` (the watchdog retries
 *   until the local deadline, as for one Redis).
 * - release, force-release: on every node; they fail only when fewer than a quorum answered.
 * - notifications: from every node, merged (a release publishes on each).
 *
 * Every operation decides as soon as the answers in hand settle it (`gather.ts`: one fan-out by
 * callbacks, no fiber per node), so a node that is down or paused slows nothing while a quorum
 * answers.
 */
import type { Scope } from "effect"
import { Effect, Option, Queue } from "effect"
import type {
  AcquireResult,
  LockInfo,
  LockPrimitives,
  LockRequest,
  Notification,
  ReleaseResult,
  RenewOutcome,
  RenewResult
} from "../../LockBackend.js"
import type { BackendOperation } from "../../LockError.js"
import { LockBackendError } from "../../LockError.js"
import { driftOf } from "../lock/options.js"
import { messageOf } from "../redis/errors.js"
import type { KeyLayout } from "../redis/keys.js"
import * as scripts from "../redis/lockScripts.js"
import { runScript } from "../redis/scripts.js"
import type { Script } from "../redis/scripts.js"
import { nowMillis } from "../time.js"
import type { Answer, Start } from "./gather.js"
import { errorsOf, gather, gatherEffects, makePendingCalls, valuesOf } from "./gather.js"
import type { Node } from "./nodes.js"
import { raiseToken } from "./scripts.js"

export const redlockName = "redlock"

/** The majority of `n` nodes. */
export const quorumOf = (n: number): number => Math.floor(n / 2) + 1

const answeredCount = <A>(answers: ReadonlyArray<Answer<A>>) => valuesOf(answers).length

export const makePrimitives = (
  nodes: ReadonlyArray<Node>,
  layout: KeyLayout,
  scope: Scope.Scope
): Effect.Effect<LockPrimitives, never, Scope.Scope> =>
  Effect.gen(function*() {
    const total = nodes.length
    const quorum = quorumOf(total)
    const pending = yield* makePendingCalls(scope)

    /** `script` on every node, by callbacks (`gather`). */
    const onEvery = <I extends ReadonlyArray<unknown>, A>(
      operation: BackendOperation,
      key: string,
      script: Script<I, A>,
      input: I
    ): Array<Start<A>> => nodes.map((node) => (done) => node.commands.start.call(operation, key, script, input, done))

    const quorumError = <A>(
      operation: BackendOperation,
      key: string | undefined,
      answers: ReadonlyArray<Answer<A>>,
      what = "answered"
    ) => {
      const errors = errorsOf(answers)
      const failures = answers.flatMap((answer, index) =>
        answer !== undefined && answer._tag === "Left"
          ? [`${nodes[index]?.name ?? index}: ${messageOf(answer.left.cause ?? answer.left)}`]
          : answer === undefined
          ? [`${nodes[index]?.name ?? index}: no answer yet`]
          : []
      )
      const message = `only ${answeredCount(answers)} of ${total} Redlock nodes ${what}, a quorum is ${quorum}` +
        (failures.length === 0 ? "" : ` (${failures.join("; ")})`)
      const cause = new AggregateError(errors, message)
      return new LockBackendError(
        key === undefined
          ? { backend: redlockName, operation, cause }
          : { backend: redlockName, operation, key, cause }
      )
    }

    // --- acquire ----------------------------------------------------------------------------------

    const took = (result: AcquireResult) => result._tag === "Acquired"

    /**
     * Raise every node's counter to `token`, written at once (see the header), answers ignored;
     * except on the nodes that granted with exactly that token, whose counter already stands there
     * (so a grant on nodes whose counters agree, the usual case, sends no raise at all).
     */
    const raiseEverywhere = (key: string, token: bigint, granted: ReadonlyArray<readonly [number, bigint]>) => {
      const tokenKey = layout.keysOf(key).token
      const atToken = new Set(granted.flatMap(([index, t]) => (t === token ? [index] : [])))
      for (const [index, node] of nodes.entries()) {
        if (atToken.has(index)) continue
        // A node that is away gets no raise: the tokens' order then rests on the other nodes.
        if (!node.connections.clear()) continue
        node.connections.batch()
        runScript(node.connections.command, raiseToken, [tokenKey, token], () => {}, () => {})
      }
    }

    /**
     * When a lock busy on the answering nodes may be had: once enough of their leases ended for a
     * quorum to be free (the k-th shortest), or the longest known when too few answered to tell.
     */
    const busyTtl = (acquired: number, ttls: ReadonlyArray<number | undefined>): number | undefined => {
      const sorted = ttls.map((ttl) => ttl ?? Infinity).sort((a, b) => a - b)
      const ttl = sorted[Math.min(Math.max(0, quorum - acquired - 1), sorted.length - 1)]
      return ttl === undefined || ttl === Infinity ? undefined : ttl
    }

    const releaseOn = (indices: ReadonlyArray<number>, key: string, owner: string) =>
      indices.length === 0 ? Effect.void : Effect.asVoid(gather(
        pending,
        onEvery("release", key, scripts.release, [layout.keysOf(key), owner]).filter((_, i) => indices.includes(i)),
        () => false
      ))

    const tryAcquire = (request: LockRequest): Effect.Effect<AcquireResult, LockBackendError> =>
      Effect.uninterruptible(Effect.gen(function*() {
        const startedAt = yield* nowMillis
        const keys = layout.keysOf(request.key)
        const gathered = yield* gather<AcquireResult>(
          pending,
          nodes.map((node) => (done) =>
            node.commands.start.callTaking("acquire", request, took, scripts.acquire, [keys, request], done)
          ),
          (answers) => {
            const values = valuesOf(answers)
            const acquired = values.filter(([, result]) => result._tag === "Acquired").length
            const refused = answers.filter((answer) => answer !== undefined).length - acquired
            return acquired >= quorum || total - refused < quorum
          }
        )
        const values = valuesOf(gathered.answers)
        const acquired: Array<readonly [number, bigint]> = []
        const ttls: Array<number | undefined> = []
        for (const [index, result] of values) {
          if (result._tag === "Acquired") acquired.push([index, result.fencingToken])
          else ttls.push(result.ttlMillis)
        }
        const elapsed = (yield* nowMillis) - startedAt
        const validity = request.leaseMillis - elapsed - driftOf(request.leaseMillis)
        if (acquired.length >= quorum && validity > 0) {
          if (!request.fencing) return { _tag: "Acquired", fencingToken: 0n }
          const token = acquired.reduce((max, [, token]) => (token > max ? token : max), 0n)
          raiseEverywhere(request.key, token, acquired)
          return { _tag: "Acquired", fencingToken: token }
        }
        // Not held: undo what was taken. Calls still in flight are interrupted, and release what
        // they may have taken themselves (`callTaking`).
        yield* gathered.interruptPending
        yield* releaseOn(acquired.map(([index]) => index), request.key, request.owner)
        if (acquired.length >= quorum) {
          // A quorum, but too late to be of use: the lease would be (nearly) over on arrival.
          return { _tag: "Busy", ttlMillis: 0 }
        }
        // So many nodes failed that no quorum can answer: an error, not a busy lock.
        if (errorsOf(gathered.answers).length > total - quorum) {
          return yield* Effect.fail(quorumError("acquire", request.key, gathered.answers))
        }
        return { _tag: "Busy", ttlMillis: busyTtl(acquired.length, ttls) }
      }))

    // --- renew ------------------------------------------------------------------------------------

    const renew = (
      requests: ReadonlyArray<LockRequest>
    ): Effect.Effect<ReadonlyArray<RenewOutcome>, LockBackendError> => {
      if (requests.length === 0) return Effect.succeed([])
      const locks = requests.map((request) => layout.keysOf(request.key).lock)
      const firstKey = requests[0]?.key ?? ""
      const tally = (answers: ReadonlyArray<Answer<ReadonlyArray<RenewResult>>>) =>
        requests.map((_, i) => {
          let renewed = 0
          let stolen = 0
          let expired = 0
          for (const [, results] of valuesOf(answers)) {
            const result = results[i]
            if (result?._tag === "Renewed") renewed++
            else if (result?.reason === "stolen") stolen++
            else expired++
          }
          return { renewed, stolen, expired }
        })
      return Effect.map(
        gather(
          pending,
          onEvery("renew", firstKey, scripts.renew, [locks, requests]),
          (answers) => {
            const pending = answers.filter((answer) => answer === undefined).length
            return tally(answers).every(({ renewed }) => renewed >= quorum || renewed + pending < quorum)
          }
        ),
        ({ answers }) =>
          tally(answers).map(({ expired, renewed, stolen }, i): RenewOutcome => {
            if (renewed >= quorum) return { _tag: "Renewed" }
            // So many nodes said "not yours" that no quorum can be renewed, whatever the others did.
            if (stolen + expired > total - quorum) {
              return { _tag: "Lost", reason: stolen > 0 ? "stolen" : "expired" }
            }
            return quorumError("renew", requests[i]?.key, answers, "renewed")
          })
      )
    }

    // --- release ----------------------------------------------------------------------------------

    const release = (key: string, owner: string): Effect.Effect<ReleaseResult, LockBackendError> =>
      Effect.flatMap(
        gather(
          pending,
          onEvery("release", key, scripts.release, [layout.keysOf(key), owner]),
          // A quorum that released (or still holds) settles it; the rest go on in the backend's
          // scope, after everything else sent to those nodes for this owner.
          (answers) => valuesOf(answers).filter(([, result]) => result._tag !== "NotHeld").length >= quorum
        ),
        ({ answers }): Effect.Effect<ReleaseResult, LockBackendError> => {
          const results = valuesOf(answers).map(([, result]) => result._tag)
          if (results.length < quorum) return Effect.fail(quorumError("release", key, answers))
          if (results.includes("Released")) return Effect.succeed({ _tag: "Released" })
          if (results.includes("StillHeld")) return Effect.succeed({ _tag: "StillHeld" })
          return Effect.succeed({ _tag: "NotHeld" })
        }
      )

    const forceRelease = (key: string): Effect.Effect<boolean, LockBackendError> =>
      Effect.flatMap(
        gather(
          pending,
          onEvery("force-release", key, scripts.forceRelease, [layout.keysOf(key)]),
          () => false
        ),
        ({ answers }) => {
          const results = valuesOf(answers)
          return results.length < quorum
            ? Effect.fail(quorumError("force-release", key, answers))
            : Effect.succeed(results.some(([, deleted]) => deleted))
        }
      )

    // --- inspect: the lock as a quorum sees it ------------------------------------------------------

    const inspect = (key: string): Effect.Effect<Option.Option<LockInfo>, LockBackendError> =>
      Effect.flatMap(
        gather(
          pending,
          onEvery("inspect", key, scripts.inspect, [layout.keysOf(key).lock]),
          () => false
        ),
        ({ answers }) => {
          const results = valuesOf(answers)
          if (results.length < quorum) return Effect.fail(quorumError("inspect", key, answers))
          const held = results.flatMap(([, info]) => (Option.isSome(info) ? [info.value] : []))
          if (held.length < quorum) return Effect.succeed(Option.none())
          const counts = new Map<string, Array<number>>()
          for (const info of held) {
            for (const { holdCount, owner } of info.holders) {
              counts.set(owner, [...(counts.get(owner) ?? []), holdCount])
            }
          }
          const onQuorum = Array.from(counts).filter(([, per]) => per.length >= quorum)
          const holders = (onQuorum.length > 0 ? onQuorum : Array.from(counts)).map(([owner, per]) => ({
            owner,
            holdCount: Math.min(...per)
          }))
          // How long the lock still stands on a quorum.
          const ttl = held.map((info) => info.ttlMillis ?? Infinity).sort((a, b) => b - a)[quorum - 1]
          return Effect.succeed(Option.some({
            key,
            holders,
            ttlMillis: ttl === undefined || ttl === Infinity ? undefined : ttl
          }))
        }
      )

    // --- notifications: every node's, merged --------------------------------------------------------

    const notifications = yield* Effect.acquireRelease(Queue.unbounded<Notification>(), Queue.shutdown)
    for (const node of nodes) {
      yield* Effect.forkScoped(Effect.interruptible(Effect.forever(
        Effect.flatMap(
          Queue.takeBetween(node.subscriptions.notifications, 1, Number.POSITIVE_INFINITY),
          (batch) => Queue.offerAll(notifications, batch)
        )
      )))
    }

    const primitives: LockPrimitives = {
      name: redlockName,
      tryAcquire,
      renew,
      release,
      forceRelease,
      inspect,
      // Notifications flow once one node's subscription does: every release publishes on each node.
      subscribe: (key) =>
        Effect.asVoid(gatherEffects(
          scope,
          nodes.map((node) => node.subscriptions.subscribe(key)),
          (answers) => answeredCount(answers) > 0
        )),
      unsubscribe: (key) =>
        Effect.asVoid(gatherEffects(scope, nodes.map((node) => node.subscriptions.unsubscribe(key)), () => true)),
      notifications
    }
    return primitives
  })
