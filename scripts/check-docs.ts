/**
 * Type-checks every TypeScript example in README.md and docs/*.md (see `scripts/docBlocks.ts`
 * for the conventions). Each block is written to `.scratch/docs-check/` (git-ignored) as its own
 * module, `"effect-lock"` is mapped to `src/index.ts` through tsconfig `paths`, and `tsc` runs over
 * all of them with the repository's compiler options. Errors are reported at their Markdown line.
 *
 * Blocks that use `RedisBackend` are skipped, with a warning, while `src/index.ts` does not export
 * it yet; once it does they are checked like every other block.
 *
 * Usage: `npm run check:docs` (part of `npm test`).
 */
import { spawnSync } from "node:child_process"
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { dirname, join, resolve } from "node:path"
import { fileURLToPath } from "node:url"
import type { DocBlock } from "./docBlocks.js"
import { allBlocks, blockFileName, docFiles } from "./docBlocks.js"

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..")
export const checkDir = join(root, ".scratch", "docs-check")

/** Write the blocks and the tsconfig that maps `effect-lock` to the sources. */
export const writeBlocks = (blocks: ReadonlyArray<DocBlock>): void => {
  rmSync(checkDir, { recursive: true, force: true })
  mkdirSync(checkDir, { recursive: true })
  for (const block of blocks) {
    // `export {}` makes every block a module, so two blocks may both declare `program`.
    writeFileSync(join(checkDir, blockFileName(block)), `${block.code}\n\nexport {}\n`)
  }
  writeFileSync(
    join(checkDir, "tsconfig.json"),
    JSON.stringify(
      {
        extends: "../../tsconfig.json",
        compilerOptions: {
          noEmit: true,
          // Examples declare things to show them, not to use them.
          noUnusedLocals: false,
          noUnusedParameters: false,
          paths: { "effect-lock": ["../../src/index.ts"] }
        },
        include: ["*.ts"]
      },
      null,
      2
    )
  )
}

const redisExported = (): boolean => {
  const index = join(root, "src", "index.ts")
  return existsSync(index) && /\bRedisBackend\b/.test(readFileSync(index, "utf8"))
}

const main = (): number => {
  const blocks = allBlocks(root)
  const skippedRedis = redisExported() ? [] : blocks.filter((b) => !b.noCheck && /\bRedisBackend\b/.test(b.code))
  const checked = blocks.filter((b) => !b.noCheck && !skippedRedis.includes(b))
  const fragments = blocks.filter((b) => b.noCheck)
  for (const block of skippedRedis) {
    console.warn(`${block.file}:${block.line}: skipped (RedisBackend is not exported from src/index.ts yet)`)
  }
  writeBlocks(checked)
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
    (fragments.length > 0 ? `, ${fragments.length} marked no-check` : "") +
    (skippedRedis.length > 0 ? `, ${skippedRedis.length} skipped (RedisBackend)` : "")
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
