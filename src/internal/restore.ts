/** The `restore` of `Effect.uninterruptibleMask`: makes a part of a masked region interruptible again. */
import type { Effect } from "effect"

export type Restore = <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.Effect<A, E, R>
