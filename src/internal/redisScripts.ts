/**
 * The Lua scripts in `lua/`, read once when a backend starts and run with `EVALSHA`, falling back
 * to `EVAL` (which also caches the script on the server) when the server answers `NOSCRIPT`
 * (after a restart, a `SCRIPT FLUSH` or a failover to a replica that never saw `SCRIPT LOAD`).
 */
import { createHash } from "node:crypto"
import { readFile } from "node:fs/promises"
import type { Redis } from "ioredis"

export const scriptNames = ["acquire", "renew", "release", "hand-over", "force-release", "inspect"] as const

export type ScriptName = typeof scriptNames[number]

export interface Script {
  readonly name: ScriptName
  readonly source: string
  readonly sha: string
}

export type Scripts = { readonly [K in ScriptName]: Script }

// `lua/` sits next to `src/` and `dist/`, and this module is one folder deeper in both, so the
// same relative URL works under tsx/vitest and after `npm run build`.
const scriptUrl = (name: ScriptName) => new URL(`../../lua/${name}.lua`, import.meta.url)

export const readScripts = async (): Promise<Scripts> => {
  const entries = await Promise.all(scriptNames.map(async (name) => {
    const source = await readFile(scriptUrl(name), "utf8")
    const sha = createHash("sha1").update(source).digest("hex")
    return [name, { name, source, sha }] as const
  }))
  return Object.fromEntries(entries) as unknown as Scripts
}

/** `SCRIPT LOAD` every script: checks connectivity, permissions and that each script compiles. */
export const loadScripts = async (redis: Redis, scripts: Scripts): Promise<void> => {
  await Promise.all(scriptNames.map(async (name) => {
    const script = scripts[name]
    const sha = await redis.script("LOAD", script.source) as string
    if (sha !== script.sha) {
      throw new Error(`SCRIPT LOAD of ${name}.lua returned ${sha}, expected ${script.sha}`)
    }
  }))
}

const isNoScript = (error: unknown) => error instanceof Error && error.message.startsWith("NOSCRIPT")

/**
 * Run a script in one round trip (two after a `NOSCRIPT`, which means the script did not run, so
 * retrying it with `EVAL` cannot run it twice). Exactly one of the callbacks is called, once.
 * Callbacks rather than a promise chain keep the hot path to one promise per command.
 */
export const runScript = (
  redis: Redis,
  script: Script,
  keys: ReadonlyArray<string>,
  args: ReadonlyArray<string>,
  onReply: (reply: unknown) => void,
  onError: (error: unknown) => void
): void => {
  redis.evalsha(script.sha, keys.length, ...keys, ...args).then(onReply, (error: unknown) => {
    if (isNoScript(error)) {
      redis.eval(script.source, keys.length, ...keys, ...args).then(onReply, onError)
    } else {
      onError(error)
    }
  })
}
