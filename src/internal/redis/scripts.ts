/**
 * Typed script descriptors (the shape of redis-semaphore's `createEval`): a script names its file
 * in `lua/`, how its typed input becomes `KEYS` and `ARGV`, and how its reply decodes. One place
 * loads scripts (`SCRIPT LOAD`), runs them with `EVALSHA` and falls back to `EVAL` on `NOSCRIPT`
 * (after a restart, a `SCRIPT FLUSH` or a failover to a replica that never saw `SCRIPT LOAD`).
 *
 * The client is structural (`ScriptClient`), so code that only runs scripts (`Fencing`) needs no
 * ioredis types: an ioredis `Redis` or `Cluster` is one.
 */
import { createHash } from "node:crypto"
import { readFileSync } from "node:fs"

/** What running a script needs of a client: ioredis' `evalsha` and `eval`. */
export interface ScriptClient {
  evalsha(sha: string, numKeys: number, ...keysAndArgs: Array<string>): Promise<unknown>
  eval(source: string, numKeys: number, ...keysAndArgs: Array<string>): Promise<unknown>
}

export interface Script<I extends ReadonlyArray<unknown>, A> {
  /** The file `lua/<name>.lua`. */
  readonly name: string
  readonly source: string
  readonly sha: string
  readonly encode: (...input: I) => readonly [keys: ReadonlyArray<string>, args: ReadonlyArray<string>]
  /** The reply, decoded; `undefined` when it is not what the script returns. */
  readonly decode: (reply: unknown) => A | undefined
}

// `lua/` sits next to `src/` and `dist/`, and this module is two folders deeper in both, so the
// same relative URL works under tsx/vitest and after `npm run build`.
const scriptUrl = (name: string) => new URL(`../../../lua/${name}.lua`, import.meta.url)

/** Define a script; its source is read (once) when it is first needed. */
export const defineScript = <I extends ReadonlyArray<unknown>, A>(spec: {
  readonly name: string
  readonly encode: Script<I, A>["encode"]
  readonly decode: Script<I, A>["decode"]
}): Script<I, A> => {
  let loaded: { readonly source: string; readonly sha: string } | undefined
  const load = () => {
    if (loaded === undefined) {
      const source = readFileSync(scriptUrl(spec.name), "utf8")
      loaded = { source, sha: createHash("sha1").update(source).digest("hex") }
    }
    return loaded
  }
  return {
    ...spec,
    get source() {
      return load().source
    },
    get sha() {
      return load().sha
    }
  }
}

/** `SCRIPT LOAD` each script: checks connectivity, permissions and that each script compiles. */
export const loadScripts = async (
  client: { script(subcommand: "LOAD", source: string): Promise<unknown> },
  scripts: ReadonlyArray<Script<never, unknown>>
): Promise<void> => {
  await Promise.all(scripts.map(async (script) => {
    const sha = await client.script("LOAD", script.source)
    if (sha !== script.sha) {
      throw new Error(`SCRIPT LOAD of ${script.name}.lua returned ${String(sha)}, expected ${script.sha}`)
    }
  }))
}

const isNoScript = (error: unknown) => error instanceof Error && error.message.startsWith("NOSCRIPT")

/**
 * Run a script in one round trip (two after a `NOSCRIPT`, which means the script did not run, so
 * retrying it with `EVAL` cannot run it twice). Exactly one of the callbacks is called, once, with
 * the raw reply: callbacks rather than a promise chain keep the hot path to one promise per command.
 */
export const runScript = <I extends ReadonlyArray<unknown>, A>(
  client: ScriptClient,
  script: Script<I, A>,
  input: I,
  onReply: (reply: unknown) => void,
  onError: (error: unknown) => void
): void => {
  const [keys, args] = script.encode(...input)
  client.evalsha(script.sha, keys.length, ...keys, ...args).then(onReply, (error: unknown) => {
    if (isNoScript(error)) client.eval(script.source, keys.length, ...keys, ...args).then(onReply, onError)
    else onError(error)
  })
}
