/**
 * Finds the TypeScript examples in the documentation, so that `scripts/check-docs.ts` can
 * type-check them and `test/docs.test.ts` can run the ones that show their output.
 *
 * Conventions in the Markdown:
 *
 * - A fence whose info string starts with `ts` or `typescript` is an example. It must type-check
 *   as a module on its own, importing the library as `"effect-lock"` (and its subpaths, such as
 *   `"effect-lock/RedisBackend"`).
 * - `ts no-check` marks a deliberate fragment: it is neither type-checked nor run. Keep these rare.
 * - A fence with the info string `text output` that directly follows an example (blank lines in
 *   between are allowed) is that example's expected standard output. The docs test runs the
 *   example and compares. Effect log lines (`timestamp=... level=...`) are left out of the
 *   comparison, so examples print what they claim with `Console.log`. Examples that use
 *   `RedisBackend` are only type-checked, never run (they would need a server).
 */
import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { join, relative } from "node:path"

export interface DocBlock {
  /** The Markdown file, relative to the repository root. */
  readonly file: string
  /** 1-based index of the block among the file's TypeScript blocks. */
  readonly index: number
  /** 1-based line in the Markdown of the block's first code line. */
  readonly line: number
  readonly code: string
  readonly noCheck: boolean
  /** The expected standard output, when the block is followed by a `text output` fence. */
  readonly output: string | undefined
}

interface Fence {
  readonly info: string
  readonly line: number
  readonly body: string
  /** The line of the closing fence. */
  readonly end: number
}

const fenceOpen = /^(\s*)(`{3,}|~{3,})\s*(.*)$/

const fences = (markdown: string): ReadonlyArray<Fence> => {
  const lines = markdown.split(/\r?\n/)
  const found: Array<Fence> = []
  for (let i = 0; i < lines.length; i++) {
    const open = fenceOpen.exec(lines[i]!)
    if (open === null) continue
    const marker = open[2]!
    const body: Array<string> = []
    let j = i + 1
    while (j < lines.length && !(lines[j]!.trim().startsWith(marker) && lines[j]!.trim().replace(/[`~]/g, "") === "")) {
      body.push(lines[j]!)
      j++
    }
    found.push({ info: open[3]!.trim(), line: i + 2, body: body.join("\n"), end: j + 1 })
    i = j
  }
  return found
}

const isTs = (info: string) => /^(ts|typescript)(\s|$)/.test(info)

/** The TypeScript blocks of one Markdown text. */
export const extractBlocks = (file: string, markdown: string): ReadonlyArray<DocBlock> => {
  const all = fences(markdown)
  const lines = markdown.split(/\r?\n/)
  const blocks: Array<DocBlock> = []
  all.forEach((fence, i) => {
    if (!isTs(fence.info)) return
    const next = all[i + 1]
    // Only blank lines may separate an example from its output.
    const adjacent = next !== undefined &&
      lines.slice(fence.end, next.line - 2).every((line) => line.trim() === "")
    const output = adjacent && next.info === "text output" ? next.body : undefined
    blocks.push({
      file,
      index: blocks.length + 1,
      line: fence.line,
      code: fence.body,
      noCheck: /(^|\s)no-check(\s|$)/.test(fence.info),
      output
    })
  })
  return blocks
}

/** README.md and every Markdown file under docs/, relative to `root`. */
export const docFiles = (root: string): ReadonlyArray<string> => {
  const docs = join(root, "docs")
  const inDocs = (() => {
    try {
      return readdirSync(docs).filter((name) => name.endsWith(".md")).sort().map((name) => join(docs, name))
    } catch {
      return []
    }
  })()
  return [join(root, "README.md"), ...inDocs].map((path) => relative(root, path))
}

/** Every TypeScript block of the documentation under `root`. */
export const allBlocks = (root: string): ReadonlyArray<DocBlock> =>
  docFiles(root).flatMap((file) => {
    try {
      return extractBlocks(file, readFileSync(join(root, file), "utf8"))
    } catch {
      return []
    }
  })

/** A file name for the extracted block: `docs/semantics.md` block 3 -> `docs_semantics_md_03.ts`. */
export const blockFileName = (block: DocBlock): string =>
  `${block.file.replace(/[^A-Za-z0-9]/g, "_")}_${String(block.index).padStart(2, "0")}.ts`

/** Whether `text` leaves a logfmt double-quoted value open (an odd number of unescaped quotes). */
const opensQuote = (text: string, open: boolean): boolean => {
  let inside = open
  for (let i = 0; i < text.length; i++) {
    if (text[i] === "\\") i++
    else if (text[i] === "\"") inside = !inside
  }
  return inside
}

/**
 * Standard output with Effect's logfmt log records removed (including the continuation lines of
 * a multi-line quoted value), trailing whitespace trimmed.
 */
export const comparableOutput = (stdout: string): string => {
  const kept: Array<string> = []
  let inLog = false
  for (const line of stdout.split(/\r?\n/)) {
    if (inLog) {
      inLog = opensQuote(line, true)
      continue
    }
    if (/^timestamp=\S+ level=/.test(line)) {
      inLog = opensQuote(line, false)
      continue
    }
    kept.push(line.trimEnd())
  }
  return kept.join("\n").trim()
}

/** Whether a block uses the Redis backend (such blocks are type-checked, never run). */
export const usesRedis = (block: DocBlock): boolean => /\bRedisBackend\b/.test(block.code)

/**
 * Write `blocks` into `dir` (emptied first), one module per block, with a tsconfig that maps
 * `"effect-lock"` to `<root>/src/index.ts` and each subpath `"effect-lock/X"` to `<root>/src/X.ts`,
 * for both `tsc` and `tsx`. `alsoInclude` adds files
 * (relative to `root`) to the type-checked program.
 */
export const writeBlockFiles = (
  root: string,
  dir: string,
  blocks: ReadonlyArray<DocBlock>,
  alsoInclude: ReadonlyArray<string> = []
): void => {
  rmSync(dir, { recursive: true, force: true })
  mkdirSync(dir, { recursive: true })
  for (const block of blocks) {
    // `export {}` makes every block a module, so two blocks may both declare `program`.
    writeFileSync(join(dir, blockFileName(block)), `${block.code}\n\nexport {}\n`)
  }
  const up = relative(dir, root).split("\\").join("/")
  writeFileSync(
    join(dir, "tsconfig.json"),
    JSON.stringify(
      {
        extends: `${up}/tsconfig.json`,
        compilerOptions: {
          noEmit: true,
          // Examples declare things to show them, not to use them.
          noUnusedLocals: false,
          noUnusedParameters: false,
          paths: {
            "effect-lock": [`${up}/src/index.ts`],
            "effect-lock/*": [`${up}/src/*.ts`],
            // redlock 5.0.0-beta.2's "exports" map has no "types" entry, so NodeNext cannot find its
            // typings on its own (docs/switching-from-redlock.md imports it).
            "redlock": [`${up}/node_modules/redlock/dist/index.d.ts`]
          }
        },
        include: ["*.ts", ...alsoInclude.map((path) => `${up}/${path}`)]
      },
      null,
      2
    )
  )
}
