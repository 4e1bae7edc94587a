/**
 * Type-checks every TypeScript example in README.md and docs/*.md (see `scripts/docBlocks.ts`
 * for the conventions). Each block is written to `.scratch/docs-check/` (git-ignored) as its own
 * module, `"effect-lock"` is mapped to `src/index.ts` through tsconfig `paths`, and `tsc` runs over
 * all of them with the repository's compiler options. Errors are reported at their Markdown line.
 *
 * Usage: `npm run check:docs` (part of `npm test`).
 */
import { spawnSync } from "node:child_process"
import { existsSync } from "node:fs"
import { dirname, join, resolve } from "node:path"
import { fileURLToPath } from "node:url"
import { allBlocks, blockFileName, docFiles, writeBlockFiles } from "./docBlocks.js"

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..")
const checkDir = join(root, ".scratch", "docs-check")

const main = (): number => {
  const blocks = allBlocks(root)
  const checked = blocks.filter((b) => !b.noCheck)
  const fragments = blocks.filter((b) => b.noCheck)
  // This script is outside tsconfig.json's `include`, so it is checked along with the examples.
  writeBlockFiles(root, checkDir, checked, ["scripts/check-docs.ts"])
  const byName = new Map(checked.map((block) => [blockFileName(block), block]))

  const tsc = join(root, "node_modules", "typescript", "bin", "tsc")
  const run = spawnSync(process.execPath, [tsc, "-p", join(checkDir, "tsconfig.json"), "--pretty", "false"], {
    cwd: root,
    encoding: "utf8"
  })
  const output = `${run.stdout ?? ""}${run.stderr ?? ""}`
  let errors = 0
  for (const line of output.split(/\r?\n/)) {
    if (line.trim() === "") continue
    const match = /^(.*?)\((\d+),(\d+)\): (.*)$/.exec(line)
    const name = match?.[1]?.split(/[\\/]/).pop()
    const block = name === undefined ? undefined : byName.get(name)
    if (match !== null && block !== undefined) {
      errors++
      console.error(`${block.file}:${block.line + Number(match[2]) - 1}:${match[3]}: ${match[4]}`)
    } else {
      if (/error TS\d+/.test(line)) errors++
      console.error(line)
    }
  }
  const files = docFiles(root).filter((file) => existsSync(join(root, file))).length
  const summary = `check-docs: ${checked.length} example(s) in ${files} file(s) type-checked` +
    (fragments.length > 0 ? `, ${fragments.length} marked no-check` : "")
  if (run.status !== 0 || errors > 0) {
    console.error(`${summary}: FAILED (${errors} error(s))`)
    return 1
  }
  console.log(`${summary}: ok`)
  return 0
}

if (process.argv[1] !== undefined && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  process.exitCode = main()
}
