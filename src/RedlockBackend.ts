/**
 * The Redlock backend: one lock over N independent Redis masters (no replication between them),
 * held while a majority of them hold it, as in the algorithm of the Redis documentation. Every
 * node speaks the same Redisson-compatible layout as `RedisBackend` does on one server.
 *
 * It provides the same `LockBackend` service, so every lock kind runs on it unchanged. What it buys
 * and what it cannot promise (the clock assumptions, the fencing tokens' order across nodes, a
 * node restarted without persistence) is written down in `docs/redlock.md`.
 *
 * It needs the optional peer `ioredis`, so it is only at its own subpath:
 * `effect-lock/RedlockBackend`.
 *
 * @since 0.2.0
 */
import type { Duration, Redacted } from "effect"
import { Effect, ExecutionStrategy, Layer, Scope } from "effect"
import type { Redis, RedisOptions } from "ioredis"
import { makeKeyLayout } from "./internal/redis/keys.js"
import { openNode } from "./internal/redlock/nodes.js"
import { validateOptions } from "./internal/redlock/options.js"
import { makePrimitives } from "./internal/redlock/primitives.js"
import type { LockBackendShape } from "./LockBackend.js"
import { LockBackend } from "./LockBackend.js"
import type { LockBackendError, LockOptionsError } from "./LockError.js"

/**
 * How to reach one node: a Redis URL (`Redacted` when it carries a password), ioredis options, or
 * an existing ioredis client (used as it is and never closed, as with `RedisBackend`).
 *
 * @since 0.2.0
 * @category models
 */
export type RedlockNode = string | Redacted.Redacted<string> | RedisOptions | Redis

/**
 * @since 0.2.0
 * @category models
 */
export interface RedlockBackendOptions {
  /**
   * The independent masters, at least one; an odd number (3 or 5) is what Redlock is for: a lock
   * is held while `floor(N / 2) + 1` of them hold it, so N = 3 survives one node down, N = 5 two.
   */
  readonly nodes: ReadonlyArray<RedlockNode>
  /** Prepended to every lock name on every node, e.g. `"myapp:"`. Default: none. */
  readonly prefix?: string | undefined
  /**
   * The budget of every call to one node (waiting for its reconnect included). Operations do not
   * wait for it once a quorum has answered, so a slow or paused node costs nothing while the
   * others answer. A whole number of milliseconds, at least 1. Default: 500 milliseconds.
   */
  readonly commandTimeout?: Duration.DurationInput | undefined
}

/**
 * Builds a Redlock backend: checks the options, connects to every node (two connections each),
 * loads the scripts on each, and closes the connections it opened when the scope closes. Fails
 * with `LockOptionsError` for bad options and `LockBackendError` when a node cannot be reached at
 * start (every node must be up to start; afterwards a minority may be down).
 *
 * @since 0.2.0
 * @category constructors
 */
export const make = (
  options: RedlockBackendOptions
): Effect.Effect<LockBackendShape, LockBackendError | LockOptionsError, Scope.Scope> =>
  Effect.gen(function*() {
    const { commandTimeout } = yield* validateOptions(options)
    const layout = makeKeyLayout(options.prefix ?? "")
    const nodes = yield* Effect.forEach(
      options.nodes,
      (spec, index) => openNode(spec, index, layout, commandTimeout),
      { concurrency: "unbounded" }
    )
    // The calls to the nodes run in a scope of their own, closed at this point of the caller's
    // scope: a hold taken later in that scope is released (its calls forked here) before it closes.
    // Forked into the caller's scope itself, a release run by one of its finalisers would fork
    // into a scope already closing, and wait forever.
    const calls = yield* Scope.fork(yield* Effect.scope, ExecutionStrategy.sequential)
    return yield* LockBackend.make(yield* makePrimitives(nodes, layout, calls))
  })

/**
 * A layer providing a Redlock `LockBackend`. The connections live as long as the layer.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { withLock } from "effect-lock"
 * import { RedlockBackend } from "effect-lock/RedlockBackend"
 *
 * const layer = RedlockBackend.layer({
 *   nodes: ["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"],
 *   prefix: "locks:"
 * })
 * const program = withLock("orders:42", Effect.log("alone on a majority"))
 * program.pipe(Effect.provide(layer))
 * ```
 *
 * @since 0.2.0
 * @category layers
 */
export const layer = (
  options: RedlockBackendOptions
): Layer.Layer<LockBackend, LockBackendError | LockOptionsError> => Layer.scoped(LockBackend, make(options))

/**
 * This module as a namespace, so that both `import { RedlockBackend } from "effect-lock/RedlockBackend"`
 * and `import * as RedlockBackend from "effect-lock/RedlockBackend"` read `RedlockBackend.layer(...)`.
 *
 * @since 0.2.0
 */
export * as RedlockBackend from "./RedlockBackend.js"
