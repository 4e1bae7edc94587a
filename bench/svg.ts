/**
 * `docs/benchmarks.svg`: horizontal bars per library for hand-off acquisitions/s, serial ops/s and
 * distinct-key ops/s, with the no-library ioredis floor as a reference bar where there is one.
 * Hand-written SVG, no dependencies; it renders on GitHub and in any browser.
 */
import type { BenchResults } from "./results.js"
import { isFailed } from "./results.js"

interface Bar {
  readonly label: string
  readonly value: number
  readonly kind: "subject" | "peer" | "reference"
  /** Printed after the value. */
  readonly note?: string | undefined
}

interface Panel {
  readonly title: string
  readonly unit: string
  readonly bars: ReadonlyArray<Bar>
}

const WIDTH = 760
const LABEL_WIDTH = 190
const VALUE_WIDTH = 230
const BAR_HEIGHT = 18
const BAR_GAP = 6
const TITLE_HEIGHT = 28
const PANEL_GAP = 18
const COLORS = { subject: "#2f6fde", peer: "#9aa5b1", reference: "#d6dbe1" } as const

const escape = (text: string) => text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;")
const format = (n: number) => Math.round(n).toLocaleString("en-US")

const kindOf = (library: string): Bar["kind"] => (library === "effect-lock" ? "subject" : "peer")

const panels = (results: BenchResults): ReadonlyArray<Panel> => {
  const raw = results.raw !== undefined && !isFailed(results.raw) ? results.raw : undefined
  const bars = <A extends { readonly library: string }>(
    outcomes: ReadonlyArray<A | { readonly library: string; readonly error: string }>,
    value: (a: A) => number
  ): Array<Bar> =>
    outcomes.filter((o): o is A => !("error" in o)).map((o) => ({
      label: o.library,
      value: value(o),
      kind: kindOf(o.library)
    }))
  const result: Array<Panel> = []
  if (results.handoff.length > 0) {
    result.push({
      title: "Hand-off: acquisitions/s, 16 workers on one key (higher is better)",
      unit: "/s",
      bars: bars(results.handoff, (r) => r.acquisitionsPerSecond).map((bar) => {
        const r = results.handoff.find((o) => o.library === bar.label)
        return r === undefined || "error" in r
          ? bar
          : { ...bar, note: `fairness ${r.fairness.toFixed(2)}, wait p99 ${r.wait.p99.toFixed(0)} ms` }
      })
    })
  }
  if (results.serial.length > 0) {
    result.push({
      title: "Serial: acquire + release/s, one fiber (higher is better)",
      unit: "/s",
      bars: [
        ...bars(results.serial, (r) => r.opsPerSecond),
        ...(raw === undefined ? [] : bareFloors(raw.floors).map((f) => ({
          label: `ioredis, no library${f.client === "autoPipelining" ? " (pipelined)" : ""}`,
          value: f.serial.opsPerSecond,
          kind: "reference" as const
        })))
      ]
    })
  }
  if (results.distinct.length > 0) {
    result.push({
      title: "Throughput: acquire + release/s, 64 fibers on distinct keys (higher is better)",
      unit: "/s",
      bars: [
        ...bars(results.distinct, (r) => r.opsPerSecond),
        ...(raw === undefined ? [] : bareFloors(raw.floors).map((f) => ({
          label: `ioredis, no library${f.client === "autoPipelining" ? " (pipelined)" : ""}`,
          value: f.distinctOpsPerSecond,
          kind: "reference" as const
        })))
      ]
    })
  }
  return result
}

/** The bare ioredis floors (the chart leaves effect-lock's own primitives to the tables). */
const bareFloors = <F extends { readonly client: string }>(floors: ReadonlyArray<F>) =>
  floors.filter((f) => f.client !== "primitives")

export const renderChart = (results: BenchResults): string => {
  const parts: Array<string> = []
  let y = 12
  for (const panel of panels(results)) {
    parts.push(`<text x="0" y="${y + 16}" class="title">${escape(panel.title)}</text>`)
    y += TITLE_HEIGHT
    const max = Math.max(1, ...panel.bars.map((bar) => bar.value))
    const span = WIDTH - LABEL_WIDTH - VALUE_WIDTH
    for (const bar of panel.bars) {
      const length = Math.max(1, (bar.value / max) * span)
      parts.push(
        `<text x="${LABEL_WIDTH - 8}" y="${y + BAR_HEIGHT - 5}" class="label" text-anchor="end">${
          escape(bar.label)
        }</text>`,
        `<rect x="${LABEL_WIDTH}" y="${y}" width="${length.toFixed(1)}" height="${BAR_HEIGHT}" rx="2" fill="${
          COLORS[bar.kind]
        }"/>`,
        `<text x="${(LABEL_WIDTH + length + 6).toFixed(1)}" y="${y + BAR_HEIGHT - 5}" class="value">${
          format(bar.value)
        }${panel.unit}${bar.note === undefined ? "" : ` · ${escape(bar.note)}`}</text>`
      )
      y += BAR_HEIGHT + BAR_GAP
    }
    y += PANEL_GAP
  }
  const footer =
    `${results.machine.cpu}, ${results.machine.cores} cores · Node ${results.machine.node} · Redis ${results.machine.redis} · ${
      results.date.slice(0, 10)
    } · npm run bench`
  parts.push(`<text x="0" y="${y + 4}" class="footer">${escape(footer)}</text>`)
  const height = y + 16
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${WIDTH}" height="${height}" viewBox="0 0 ${WIDTH} ${height}" role="img" aria-label="effect-lock benchmarks">
<style>
  text { font-family: -apple-system, BlinkMacSystemFont, "Segoe UI", Helvetica, Arial, sans-serif; fill: #24292f; }
  .title { font-size: 14px; font-weight: 600; }
  .label { font-size: 12px; }
  .value { font-size: 12px; fill: #57606a; }
  .footer { font-size: 11px; fill: #6e7781; }
</style>
<rect x="0" y="0" width="${WIDTH}" height="${height}" fill="#ffffff"/>
${parts.join("\n")}
</svg>
`
}
