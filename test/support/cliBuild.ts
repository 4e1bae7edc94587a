/**
 * The `effect-lock` executable built for one test file: a build of its own (`npm run build`
 * elsewhere may rewrite dist/ while the test runs), inside node_modules so that the package's
 * dependencies resolve from it, and a way to run it and collect what it printed.
 */
import { execFile, spawn } from "node:child_process"
import { cpSync, mkdirSync, rmSync, symlinkSync } from "node:fs"
import { join, resolve } from "node:path"
import { fileURLToPath } from "node:url"
import { promisify } from "node:util"

export interface Run {
  readonly code: number | null
  readonly stdout: string
  readonly stderr: string
}

export interface CliBuild {
  /** The build's folder. */
  readonly dir: string
  /** The executable's entry point. */
  readonly bin: string
  /** Compile the sources into the folder (a few seconds of CPU). */
  readonly make: () => Promise<void>
  readonly remove: () => void
  /** Run the executable with `args`, without `REDIS_URL` and colours unless `env` sets them. */
  readonly run: (args: ReadonlyArray<string>, env?: Record<string, string | undefined>) => Promise<Run>
}

const root = resolve(fileURLToPath(import.meta.url), "..", "..", "..")
const exec = promisify(execFile)

export const cliBuild = (name: string): CliBuild => {
  const dir = join(root, "node_modules", ".cache", `effect-lock-${name}-${process.pid}`)
  const bin = join(dir, "dist", "bin", "effect-lock.js")
  return {
    dir,
    bin,
    make: async () => {
      rmSync(dir, { recursive: true, force: true })
      mkdirSync(dir, { recursive: true })
      cpSync(join(root, "package.json"), join(dir, "package.json"))
      symlinkSync(join(root, "lua"), join(dir, "lua"))
      const tsc = join(root, "node_modules", "typescript", "bin", "tsc")
      await exec(process.execPath, [tsc, "-p", "tsconfig.build.json", "--outDir", join(dir, "dist")], { cwd: root })
    },
    remove: () => rmSync(dir, { recursive: true, force: true }),
    run: (args, env = {}) =>
      new Promise((resolvePromise, reject) => {
        const child = spawn(process.execPath, [bin, ...args], {
          cwd: root,
          env: { ...process.env, REDIS_URL: undefined, NO_COLOR: "1", ...env },
          stdio: ["ignore", "pipe", "pipe"]
        })
        let stdout = ""
        let stderr = ""
        child.stdout.setEncoding("utf8").on("data", (chunk: string) => (stdout += chunk))
        child.stderr.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk))
        child.once("error", reject)
        child.once("close", (code) => resolvePromise({ code, stdout, stderr }))
      })
  }
}
