/** Formatting and selection helpers shared by the report's modules. */
import type { Failed, Outcome } from "./results.js"
import { isFailed } from "./results.js"
import type { BenchResults } from "./results.js"

export const SUBJECT = "effect-lock"

// --- formatting -------------------------------------------------------------------------------------

export const int = (n: number) => (Number.isFinite(n) ? Math.round(n).toLocaleString("en-US") : "–")
export const dec = (n: number, digits: number) => (Number.isFinite(n) ? n.toFixed(digits) : "–")
export const mib = (bytes: number) => `${bytes >= 0 ? "+" : "−"}${dec(Math.abs(bytes) / 2 ** 20, 1)} MiB`
export const ratio = (n: number) => (Number.isFinite(n) ? `${n >= 10 ? dec(n, 0) : dec(n, 2)}×` : "–")
export const mark = (met: boolean | undefined) => (met === undefined ? "–" : met ? "✅" : "❌")

export const table = (header: ReadonlyArray<string>, rows: ReadonlyArray<ReadonlyArray<string>>, align?: string) =>
  [
    `| ${header.join(" | ")} |`,
    `| ${align === undefined ? header.map((_, i) => (i === 0 ? "---" : "---:")).join(" | ") : align} |`,
    ...rows.map((row) => `| ${row.join(" | ")} |`)
  ].join("\n")

export const ok = <A>(outcomes: ReadonlyArray<Outcome<A>>): ReadonlyArray<A> =>
  outcomes.filter((o): o is A => !isFailed(o))
export const failedRows = <A>(outcomes: ReadonlyArray<Outcome<A>>, width: number) =>
  outcomes.filter(isFailed).map((f: Failed) => [f.library, `failed: ${f.error}`, ...Array<string>(width - 2).fill("")])

export const subject = <A extends { readonly library: string }>(outcomes: ReadonlyArray<Outcome<A>>) =>
  ok(outcomes).find((o) => o.library === SUBJECT)
export const peers = <A extends { readonly library: string }>(outcomes: ReadonlyArray<Outcome<A>>) =>
  ok(outcomes).filter((o) => o.library !== SUBJECT)
export const best = <A>(items: ReadonlyArray<A>, score: (a: A) => number, lowest = false) =>
  items.reduce<A | undefined>(
    (acc, item) => acc === undefined || (lowest ? score(item) < score(acc) : score(item) > score(acc)) ? item : acc,
    undefined
  )

export const floorName = {
  default: "ioredis (default options)",
  autoPipelining: "ioredis (auto-pipelining)",
  primitives: "effect-lock's backend primitives, no hold"
} as const

/** How long a hold took in the hand-off scenario: effect-lock's time per acquisition minus its gap. */
export const holdMillis = (results: BenchResults): number | undefined => {
  const handoff = subject(results.handoff)
  if (handoff === undefined || !(handoff.acquisitionsPerSecond > 0)) return undefined
  return 1000 / handoff.acquisitionsPerSecond - handoff.gap.p50 / 1000
}
