/**
 * What a campaign prints and writes: the summary, the first violation with the history around it,
 * the plot of acquisitions per second with the faults marked (hand-written SVG, as the bench's), and
 * the results section of docs/chaos.md.
 */
import type { CampaignResult } from "./campaign.js"
import { describeRecord, surrounding } from "./checker.js"
import type { HistoryRecord } from "./history.js"
import { faultKinds } from "./schedule.js"

const list = (counts: Readonly<Record<string, number>>) =>
  Object.entries(counts).sort(([a], [b]) => a.localeCompare(b)).map(([k, v]) => `${k} ${v}`).join(", ") || "none"

const seconds = (ms: number) => `${(ms / 1000).toFixed(1)} s`

/** The summary lines (without the final `violations: K`). */
export const summaryLines = (campaign: CampaignResult): Array<string> => {
  const { options, result } = campaign
  const s = result.summary
  const faults = Object.values(s.faults).reduce((a, b) => a + b, 0)
  const recovery = Object.entries(s.recovery)
    .map(([w, ms]) => `w${w} ${ms === undefined ? "never" : `${Math.round(ms)} ms`}`)
    .join(", ")
  const lines = [
    `kind ${options.kind}, backend ${options.backend}, ${options.workers} workers, seed ${options.seed}, ` +
    `${seconds(options.totalMs)} (nemesis ${seconds(options.totalMs - options.quietMs)}, quiet ${
      seconds(options.quietMs)
    }), ` +
    `lease ${options.leaseMs} ms` + (options.broken === null ? "" : `, BROKEN VARIANT: ${options.broken}`),
    `resources: ${campaign.postgres ? "PostgreSQL row and " : "(no PostgreSQL) "}Redis key (Fencing.redisSet)`,
    `faults: ${faults} (${list(s.faults)}); worker restarts ${s.restarts}`,
    `operations: ${s.operations} (${list(s.outcomes)})`,
    `losses by reason: ${list(s.losses)}`,
    `acquisitions: ${s.acquisitions}`,
    ...Object.entries(s.writes).map(([res, w]) =>
      `writes ${res}: accepted ${w.ok}, refused ${w.refused}, unknown ${w.unknown}, not sent (lease lost) ${w.skipped}`
    ),
    `final values: ${
      Object.entries(campaign.finals).map(([res, f]) => `${res} ${f?.n} (token ${f?.token})`).join(", ")
    }`,
    `recovery after the nemesis stopped: max ${
      s.maxRecoveryMs === undefined ? "n/a" : `${Math.round(s.maxRecoveryMs)} ms`
    } (bound ${options.recoveryBoundMs} ms; ${recovery})`
  ]
  return lines
}

/** The violations, the first with the history around it. */
export const violationLines = (campaign: CampaignResult, limit = 20): Array<string> => {
  const { violations } = campaign.result
  if (violations.length === 0) return []
  const origin = campaign.startMono
  const first = violations[0]!
  const lines = [
    `FIRST VIOLATION (${first.kind}) at ${seconds(first.mono - origin)}: ${first.message}`,
    "history around it (time from the nemesis' start):",
    ...surrounding(campaign.records, first).map((r) => "  " + describeRecord(r, origin)),
    `all violations by kind: ${list(countKinds(violations))}`
  ]
  for (const v of violations.slice(0, limit)) lines.push(`  ${v.kind} at ${seconds(v.mono - origin)}: ${v.message}`)
  if (violations.length > limit) lines.push(`  ... and ${violations.length - limit} more`)
  return lines
}

const countKinds = (violations: ReadonlyArray<{ readonly kind: string }>) => {
  const counts: Record<string, number> = {}
  for (const v of violations) counts[v.kind] = (counts[v.kind] ?? 0) + 1
  return counts
}

const COLORS: Readonly<Record<string, string>> = {
  "pause-worker": "#f4a261",
  "kill-worker": "#e76f51",
  "restart-redis": "#9b2226",
  "pause-redis": "#8ab17d",
  "stop-redis": "#2a9d8f",
  "client-kill": "#6d597a",
  "proxy-latency": "#e9c46a",
  "proxy-drop": "#bc6c25",
  "proxy-half-open": "#5e548e"
}

const escape = (text: string) => text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;")

/** Acquisitions per second over the campaign, faults as bands (one lane per kind). */
export const svg = (campaign: CampaignResult): string => {
  const width = 900
  const left = 50
  const right = 20
  const plotTop = 40
  const plotHeight = 180
  const laneHeight = 12
  const lanes = faultKinds.length
  const lanesTop = plotTop + plotHeight + 28
  const height = lanesTop + lanes * laneHeight + 40
  const start = campaign.startMono
  const span = Math.max(1, campaign.endMono - start)
  const x = (mono: number) => left + ((mono - start) / span) * (width - left - right)
  const buckets = new Array<number>(Math.ceil(span / 1000)).fill(0)
  for (const r of campaign.records) {
    if (r.t !== "acquired" || r.mono < start) continue
    const i = Math.floor((r.mono - start) / 1000)
    if (i < buckets.length) buckets[i]! += 1
  }
  const max = Math.max(1, ...buckets)
  const y = (v: number) => plotTop + plotHeight - (v / max) * plotHeight
  const points = buckets.map((v, i) => `${x(start + i * 1000 + 500).toFixed(1)},${y(v).toFixed(1)}`).join(" ")
  const parts: Array<string> = []
  parts.push(
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="sans-serif" font-size="11">`,
    `<rect width="${width}" height="${height}" fill="white"/>`,
    `<text x="${left}" y="20" font-size="13" font-weight="bold">${
      escape(
        `Acquisitions per second, ${campaign.options.workers} workers, seed ${campaign.options.seed}: ` +
          `${campaign.result.violations.length} violations`
      )
    }</text>`
  )
  // faults: a band over the plot and a mark in the kind's lane
  const began = new Map<number, HistoryRecord & { readonly t: "fault" }>()
  for (const r of campaign.records) {
    if (r.t === "fault") began.set(r.fault, r)
    if (r.t !== "healed") continue
    const fault = began.get(r.fault)
    if (fault === undefined) continue
    const color = COLORS[fault.kind] ?? "#999"
    const x0 = x(fault.mono)
    const w = Math.max(1.5, x(r.mono) - x0)
    const lane = Math.max(0, faultKinds.indexOf(fault.kind as (typeof faultKinds)[number]))
    parts.push(
      `<rect x="${x0.toFixed(1)}" y="${plotTop}" width="${
        w.toFixed(1)
      }" height="${plotHeight}" fill="${color}" opacity="0.18"/>`,
      `<rect x="${x0.toFixed(1)}" y="${lanesTop + lane * laneHeight + 2}" width="${w.toFixed(1)}" height="${
        laneHeight - 4
      }" fill="${color}"/>`
    )
  }
  faultKinds.forEach((kind, lane) => {
    parts.push(
      `<text x="${left - 4}" y="${lanesTop + lane * laneHeight + 10}" text-anchor="end" font-size="9">${kind}</text>`
    )
  })
  // axes and the curve
  parts.push(
    `<line x1="${left}" y1="${plotTop + plotHeight}" x2="${width - right}" y2="${
      plotTop + plotHeight
    }" stroke="#333"/>`,
    `<line x1="${left}" y1="${plotTop}" x2="${left}" y2="${plotTop + plotHeight}" stroke="#333"/>`,
    `<text x="${left - 4}" y="${plotTop + 4}" text-anchor="end">${max}</text>`,
    `<text x="${left - 4}" y="${plotTop + plotHeight}" text-anchor="end">0</text>`,
    `<polyline points="${points}" fill="none" stroke="#2f6fde" stroke-width="1.2"/>`
  )
  for (let s = 0; s <= span / 1000; s += span > 240_000 ? 60 : 10) {
    const at = x(start + s * 1000)
    parts.push(
      `<text x="${at.toFixed(1)}" y="${plotTop + plotHeight + 14}" text-anchor="middle">${s} s</text>`
    )
  }
  const stop = x(campaign.stopMono)
  parts.push(
    `<line x1="${stop.toFixed(1)}" y1="${plotTop}" x2="${stop.toFixed(1)}" y2="${
      plotTop + plotHeight
    }" stroke="#000" stroke-dasharray="4 3"/>`,
    `<text x="${(stop + 4).toFixed(1)}" y="${plotTop + 12}">nemesis stops</text>`,
    `<text x="${left}" y="${
      height - 10
    }" fill="#555">Faults: one lane per kind; the plot's bands show when each was in force. Dashed: the nemesis stops, the quiet phase begins.</text>`,
    `</svg>`
  )
  return parts.join("\n") + "\n"
}

/** The results section of docs/chaos.md (between the markers). */
export const docsSection = (campaign: CampaignResult, command: string): string => {
  const s = campaign.result.summary
  const faults = Object.values(s.faults).reduce((a, b) => a + b, 0)
  const row = (k: string, v: string) => `| ${k} | ${v} |`
  const writes = Object.entries(s.writes).map(([res, w]) =>
    row(
      `writes to ${res === "pg" ? "PostgreSQL" : "Redis"}`,
      `${w.ok} accepted, ${w.refused} refused (stale token), ${w.unknown} unknown, ${w.skipped} not sent (lease lost)`
    )
  )
  return [
    `Command: \`${command}\` (run ${new Date().toISOString().slice(0, 10)}, ${campaign.run}).`,
    "",
    "| | |",
    "| --- | --- |",
    row(
      "campaign",
      `${campaign.options.workers} workers, kind \`${campaign.options.kind}\`, backend \`${campaign.options.backend}\`, ` +
        `lease ${campaign.options.leaseMs} ms, seed ${campaign.options.seed}, ${seconds(campaign.options.totalMs)} ` +
        `(quiet phase ${seconds(campaign.options.quietMs)})`
    ),
    row("faults injected", `${faults}: ${list(s.faults)}`),
    row("worker restarts", String(s.restarts)),
    row("operations", `${s.operations}: ${list(s.outcomes)}`),
    row("losses by reason", list(s.losses)),
    row("acquisitions", String(s.acquisitions)),
    ...writes,
    row(
      "final values",
      Object.entries(campaign.finals).map(([res, f]) => `${res} ${f?.n}`).join(", ")
    ),
    row(
      "max time to recover",
      `${
        s.maxRecoveryMs === undefined ? "n/a" : `${Math.round(s.maxRecoveryMs)} ms`
      } (bound ${campaign.options.recoveryBoundMs} ms)`
    ),
    row("violations", `**${campaign.result.violations.length}**`),
    "",
    "![Acquisitions per second with the faults marked](chaos.svg)"
  ].join("\n")
}

export const START_MARKER = "<!-- chaos:results:start -->"
export const END_MARKER = "<!-- chaos:results:end -->"

/** `doc` with the text between the markers replaced. */
export const replaceSection = (doc: string, section: string): string => {
  const start = doc.indexOf(START_MARKER)
  const end = doc.indexOf(END_MARKER)
  if (start < 0 || end < start) throw new Error(`docs/chaos.md lacks the markers ${START_MARKER} ... ${END_MARKER}`)
  return doc.slice(0, start + START_MARKER.length) + "\n" + section + "\n" + doc.slice(end)
}
