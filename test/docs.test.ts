/**
 * The documentation's examples that show their output are run, and what they print must be what
 * the page says they print. (Every example is also type-checked by `npm run check:docs`.)
 */
import { execFile } from "node:child_process"
import { join, resolve } from "node:path"
import { fileURLToPath } from "node:url"
import { promisify } from "node:util"
import { describe, expect, it } from "vitest"
import { allBlocks, blockFileName, comparableOutput, usesRedis, writeBlockFiles } from "../scripts/docBlocks.js"

const run = promisify(execFile)
const root = resolve(fileURLToPath(import.meta.url), "..", "..")
const dir = join(root, ".scratch", "docs-run")
const tsx = join(root, "node_modules", "tsx", "dist", "cli.mjs")

const blocks = allBlocks(root)
const runnable = blocks.filter((block) => block.output !== undefined && !block.noCheck && !usesRedis(block))
writeBlockFiles(root, dir, runnable)

describe("documentation examples", () => {
  it("every page has examples, and the ones with output are run", () => {
    expect(blocks.length).toBeGreaterThan(0)
    expect(runnable.length).toBeGreaterThan(0)
  })

  for (const block of runnable) {
    it.concurrent(`${block.file}:${block.line} prints what the page shows`, async () => {
      const { stdout } = await run(
        process.execPath,
        [tsx, "--tsconfig", join(dir, "tsconfig.json"), join(dir, blockFileName(block))],
        { cwd: root, timeout: 50_000, env: { ...process.env, NO_COLOR: "1" } }
      )
      expect(comparableOutput(stdout)).toBe(comparableOutput(block.output!))
    }, 60_000)
  }
})
