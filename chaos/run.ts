/**
 * The chaos campaign's command:
 *
 *   npm run chaos -- --minutes N --seed S [--workers W] [--kind mutex] [--backend redis]
 *                    [--lease MS] [--faults k1,k2|none] [--quiet SECONDS] [--guarded SHARE]
 *                    [--work MS] [--broken fencing|release] [--report] [--out DIR]
 *
 * Ends with the line `violations: K` and exits 0 exactly when K is 0 (a worker that did not get the
 * lock back within the bound after the nemesis stopped is a violation). `--report` writes the
 * results into docs/chaos.md and the plot into docs/chaos.svg. See docs/chaos.md.
 */
import { readFileSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { fileURLToPath } from "node:url"
import { parseArgs } from "node:util"
import { runCampaign } from "./campaign.js"
import type { BrokenVariant } from "./config.js"
import { docsSection, replaceSection, summaryLines, svg, violationLines } from "./report.js"
import type { FaultKind } from "./schedule.js"
import { faultKinds } from "./schedule.js"

const root = fileURLToPath(new URL("..", import.meta.url))

const usage = (message: string): never => {
  console.error(`chaos: ${message}`)
  console.error(
    "usage: npm run chaos -- --minutes N --seed S [--workers W] [--kind mutex] [--backend redis] " +
      "[--lease MS] [--faults k1,k2|none] [--quiet SECONDS] [--guarded SHARE] [--work MS] [--broken fencing|release] " +
      "[--report] [--out DIR]"
  )
  process.exit(2)
}

const { values } = parseArgs({
  options: {
    minutes: { type: "string" },
    seed: { type: "string" },
    workers: { type: "string", default: "6" },
    kind: { type: "string", default: "mutex" },
    backend: { type: "string", default: "redis" },
    lease: { type: "string", default: "2000" },
    faults: { type: "string" },
    broken: { type: "string" },
    report: { type: "boolean", default: false },
    out: { type: "string" },
    quiet: { type: "string" },
    guarded: { type: "string", default: "0.5" },
    work: { type: "string" }
  }
})

const number = (name: string, raw: string | undefined, min: number, max: number): number => {
  const n = Number(raw)
  if (raw === undefined || !Number.isFinite(n) || n < min || n > max) {
    return usage(`--${name} must be a number in [${min}, ${max}], got ${raw}`)
  }
  return n
}

const minutes = number("minutes", values.minutes, 0.5, 600)
const seed = Math.trunc(number("seed", values.seed, 0, 2 ** 32 - 1))
const workers = Math.trunc(number("workers", values.workers, 1, 16))
const leaseMs = Math.trunc(number("lease", values.lease, 200, 60_000))
const faults = values.faults === undefined
  ? undefined
  : values.faults === "none"
  ? []
  : values.faults.split(",").map((kind) =>
    (faultKinds as ReadonlyArray<string>).includes(kind)
      ? kind as FaultKind
      : usage(`unknown fault ${kind} (known: ${faultKinds.join(", ")})`)
  )
const broken = values.broken === undefined
  ? null
  : values.broken === "fencing" || values.broken === "release"
  ? values.broken as BrokenVariant
  : usage(`--broken must be fencing or release, got ${values.broken}`)

const totalMs = Math.round(minutes * 60_000)
// The quiet phase: long enough for a worker killed at the last moment to start again and get in.
const quietMs = values.quiet === undefined
  ? (totalMs <= 120_000 ? 20_000 : 30_000)
  : Math.round(number("quiet", values.quiet, 5, minutes * 60 - 5) * 1000)
const recoveryBoundMs = quietMs - Math.min(5_000, Math.round(quietMs / 4))
const outDir = values.out ?? join(root, ".scratch", "chaos", `seed-${seed}-${Date.now().toString(36)}`)

const campaign = await runCampaign({
  seed,
  totalMs,
  quietMs,
  recoveryBoundMs,
  workers,
  kind: values.kind,
  backend: values.backend,
  leaseMs,
  waitMs: leaseMs * 5,
  workMs: values.work === undefined
    ? Math.max(10, Math.round(leaseMs / 20))
    : Math.trunc(number("work", values.work, 0, leaseMs)),
  guardedShare: number("guarded", values.guarded, 0, 1),
  faults,
  broken,
  pgUrl: process.env.CHAOS_PG_URL ?? "postgresql://postgres@127.0.0.1:5432/test",
  outDir,
  log: (line) => console.log(line)
}).catch((error: unknown) => {
  console.error(`chaos: the campaign could not run: ${error instanceof Error ? error.stack : String(error)}`)
  console.log("violations: unknown (the campaign did not run)")
  process.exit(1)
})

for (const line of summaryLines(campaign)) console.log(line)
for (const line of violationLines(campaign)) console.log(line)
writeFileSync(join(outDir, "chaos.svg"), svg(campaign))
console.log(`history: ${join(outDir, "history.jsonl")}`)
if (values.report) {
  const command = `nice -n 10 npm run chaos -- --minutes ${minutes} --seed ${seed} --workers ${workers}` +
    (values.lease === "2000" ? "" : ` --lease ${leaseMs}`) + " --report"
  const doc = join(root, "docs", "chaos.md")
  writeFileSync(doc, replaceSection(readFileSync(doc, "utf8"), docsSection(campaign, command)))
  writeFileSync(join(root, "docs", "chaos.svg"), svg(campaign))
  console.log("report: docs/chaos.md and docs/chaos.svg")
}
const violations = campaign.result.violations.length
console.log(`violations: ${violations}`)
process.exit(violations === 0 ? 0 : 1)
