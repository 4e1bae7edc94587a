/**
 * The package as a user gets it: `npm run build` emits JavaScript and declarations, `npm pack`
 * gives a tarball, and a throw-away consumer project (strict, exactOptionalPropertyTypes,
 * NodeNext, `skipLibCheck: false`) installs it with `effect` from the registry, type-checks code
 * that relies on the error union of `withLock` and on every subpath export, and runs it. ioredis is
 * first not installed (it is an optional peer: the root and the memory backend must compile and
 * run without it), then installed, and a Redis program type-checks against
 * `effect-lock/RedisBackend`. The `effect-lock` executable runs from the installed package
 * (`npx effect-lock --help`).
 */
import { execFile } from "node:child_process"
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { mkdir } from "node:fs/promises"
import { tmpdir } from "node:os"
import { join, resolve } from "node:path"
import { fileURLToPath } from "node:url"
import { promisify } from "node:util"
import { afterAll, describe, expect, it } from "vitest"

const exec = promisify(execFile)
const root = resolve(fileURLToPath(import.meta.url), "..", "..")
const npm = process.platform === "win32" ? "npm.cmd" : "npm"
const tsc = join(root, "node_modules", "typescript", "bin", "tsc")
const work = mkdtempSync(join(tmpdir(), "effect-lock-package-"))

afterAll(() => rmSync(work, { recursive: true, force: true }))

const run = async (command: string, args: ReadonlyArray<string>, cwd: string) => {
  try {
    return await exec(command, args, { cwd, encoding: "utf8", maxBuffer: 32 * 1024 * 1024 })
  } catch (error) {
    const e = error as { stdout?: string; stderr?: string; message: string }
    throw new Error(
      `${command} ${args.join(" ")} failed in ${cwd}:\n${e.stdout ?? ""}\n${e.stderr ?? ""}\n${e.message}`
    )
  }
}

const rootPackage = JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as {
  readonly name: string
  readonly version: string
  readonly devDependencies: Record<string, string>
}

/** A Redis program, checked once ioredis is installed. */
const redisSource = `
import { Effect } from "effect"
import { withLock } from "effect-lock"
import { RedisBackend } from "effect-lock/RedisBackend"
import { RedlockBackend } from "effect-lock/RedlockBackend"
import type { LockBackendError, LockOptionsError } from "effect-lock"
import { Redis } from "ioredis"

const layer = RedisBackend.layer({ url: "redis://127.0.0.1:6379", prefix: "app:", commandTimeout: "1 second" })
const errors: Effect.Effect<void, LockBackendError | LockOptionsError, never> = Effect.asVoid(Effect.scoped(Layer.build(layer)))
const client = new Redis({ lazyConnect: true })
export const program = withLock("orders:42", Effect.log("alone")).pipe(
  Effect.provide(RedisBackend.layer({ client }))
)
export const fenced = Fencing.redisSet(client, { key: "k", value: "v", token: 1n })
export const redlock = RedlockBackend.layer({ nodes: ["redis://127.0.0.1:6379", { host: "127.0.0.1", port: 6380 }, client] })
export { errors }
import { Layer } from "effect"
import { Fencing } from "effect-lock"
`

/** The consumer's code: the README's card form, the error union checked at the type level. */
const consumerSource = `
import { Console, Effect, Fiber, Option } from "effect"
import type { LockBackendError, LockLostError, LockOptionsError, LockTimeoutError } from "effect-lock"
import { Lock, MemoryBackend, withLock } from "effect-lock"
import * as Fencing from "effect-lock/Fencing"
import * as LockModule from "effect-lock/Lock"
import { LockBackend } from "effect-lock/LockBackend"
import { LockTimeoutError as TimeoutFromSubpath } from "effect-lock/LockError"
import * as Memory from "effect-lock/MemoryBackend"

// Every subpath is the same module as its root re-export.
const sameModules: boolean = LockModule.withLock === withLock && Memory.layer === MemoryBackend.layer &&
  typeof LockBackend.make === "function" && typeof Fencing.makeMemory === "object" &&
  TimeoutFromSubpath === (await import("effect-lock")).LockTimeoutError

const program = Effect.succeed(42)

const locked = Effect.scoped(withLock("k", program)).pipe(Effect.provide(MemoryBackend.layer))

// The error union must name the lock's errors: this line fails tsc if one is missing ...
type Includes<Union, Members> = [Members] extends [Union] ? true : false
const includesLockErrors: Includes<
  Effect.Effect.Error<typeof locked>,
  LockTimeoutError | LockLostError | LockBackendError
> = true
// ... and this one if the union holds anything else, or if a requirement is left unprovided.
const exact: Effect.Effect<number, LockTimeoutError | LockLostError | LockBackendError | LockOptionsError, never> =
  locked

const main = Effect.gen(function*() {
  const value = yield* exact
  const token = yield* withLock("k", (lease) => Effect.succeed(lease.fencingToken))
  const piped = yield* Effect.succeed("piped").pipe(Lock.withLock("k", { wait: "1 second" }))
  const free = yield* Lock.withLockIfAvailable("k", Effect.succeed("free"))
  const holder = yield* Effect.fork(withLock("busy", Effect.sleep("200 millis")))
  yield* Effect.sleep("20 millis")
  const timeout = yield* withLock("busy", Effect.succeed("acquired"), { wait: 0 }).pipe(
    Effect.catchTag("LockTimeoutError", (e) => Effect.succeed(e.reason))
  )
  yield* Fiber.join(holder)
  yield* Console.log(
    \`value=\${value} token=\${token} piped=\${piped} free=\${Option.getOrElse(free, () => "busy")} \` +
      \`includes=\${includesLockErrors} timeout=\${timeout} subpaths=\${sameModules}\`
  )
}).pipe(Effect.provide(MemoryBackend.layer))

Effect.runPromise(main)
`

describe("the npm package", () => {
  it("builds, packs, installs into a fresh consumer project, type-checks and runs", async () => {
    // 1. build
    await run(npm, ["run", "build"], root)
    expect(existsSync(join(root, "dist", "index.js"))).toBe(true)
    expect(existsSync(join(root, "dist", "index.d.ts"))).toBe(true)

    // 2. pack (already built, so skip the prepack build)
    const packDir = join(work, "pack")
    await mkdir(packDir)
    const { stdout: packed } = await run(
      npm,
      ["pack", "--ignore-scripts", "--json", "--pack-destination", packDir],
      root
    )
    const [info] = JSON.parse(packed) as Array<{ filename: string; files: Array<{ path: string }> }>
    const files = info!.files.map((f) => f.path)
    expect(files).toEqual(expect.arrayContaining(["package.json", "README.md", "dist/index.js", "dist/index.d.ts"]))
    // the Redis scripts are read at run time from lua/, next to dist/
    expect(files.filter((f) => f.startsWith("lua/") && f.endsWith(".lua")).length).toBeGreaterThan(0)
    expect(files.some((f) => f.startsWith("test/") || f.startsWith("examples/") || f.startsWith("node_modules/")))
      .toBe(false)
    const tarball = join(packDir, info!.filename.replace(/^@[^/]+\//, "").replace("/", "-"))
    expect(existsSync(tarball)).toBe(true)

    // 3. a consumer project
    const app = join(work, "app")
    await mkdir(join(app, "src"), { recursive: true })
    await run(npm, ["init", "-y"], app)
    const manifest = JSON.parse(readFileSync(join(app, "package.json"), "utf8")) as Record<string, unknown>
    writeFileSync(join(app, "package.json"), JSON.stringify({ ...manifest, type: "module" }, null, 2))
    const effectRange = rootPackage.devDependencies["effect"] ?? "^3.22.0"
    await run(npm, ["install", "--no-audit", "--no-fund", tarball, `effect@${effectRange}`], app)
    expect(existsSync(join(app, "node_modules", "ioredis"))).toBe(false)

    // The executable: `npx effect-lock --help` works from the installed tarball, without ioredis;
    // a command that needs Redis says what to install (exit 1).
    const { stdout: help } = await run("npx", ["--no-install", "effect-lock", "--help"], app)
    expect(help).toContain("EXIT STATUS")
    expect(help).toContain("unlock")
    const noIoredis = await run("npx", ["--no-install", "effect-lock", "inspect", "k"], app).then(
      () => "exited 0",
      (e: Error) => e.message
    )
    expect(noIoredis).toContain("effect-lock needs ioredis to reach Redis: npm install ioredis")

    writeFileSync(
      join(app, "tsconfig.json"),
      JSON.stringify({
        compilerOptions: {
          target: "ES2022",
          module: "NodeNext",
          moduleResolution: "NodeNext",
          strict: true,
          exactOptionalPropertyTypes: true,
          skipLibCheck: false,
          types: [],
          outDir: "dist",
          rootDir: "src"
        },
        include: ["src"]
      })
    )
    writeFileSync(join(app, "src", "main.ts"), consumerSource)

    // 4. type-check, and prove the check has teeth: a union missing LockLostError must not compile
    await run(process.execPath, [tsc, "-p", ".", "--noEmit"], app)
    writeFileSync(
      join(app, "src", "wrong.ts"),
      `import { Effect } from "effect"
import type { LockBackendError, LockOptionsError, LockTimeoutError } from "effect-lock"
import { MemoryBackend, withLock } from "effect-lock"
export const wrong: Effect.Effect<number, LockTimeoutError | LockBackendError | LockOptionsError> =
  Effect.scoped(withLock("k", Effect.succeed(1))).pipe(Effect.provide(MemoryBackend.layer))
`
    )
    const failed = await run(process.execPath, [tsc, "-p", ".", "--noEmit"], app).then(
      () => "",
      (e: Error) => e.message
    )
    expect(failed).toMatch(/LockLostError/)
    rmSync(join(app, "src", "wrong.ts"))

    // 5. compile and run the JavaScript
    await run(process.execPath, [tsc, "-p", "."], app)
    const { stdout } = await run(process.execPath, [join("dist", "main.js")], app)
    expect(stdout.trim()).toBe(
      "value=42 token=1 piped=piped free=free includes=true timeout=wait-elapsed subpaths=true"
    )

    // 6. the exports map: the package root resolves (all of it, without ioredis), internals do not
    const probe = `
      const lib = await import("effect-lock")
      console.log(typeof lib.withLock, typeof lib.Lock.acquire, typeof lib.MemoryBackend.layer, typeof lib.RedisBackend)
      const redis = await import("effect-lock/RedisBackend")
      console.log("RedisBackend: " + typeof redis.layer)
      try { await import("effect-lock/dist/internal/lock/hold.js"); console.log("internal: importable") }
      catch (e) { console.log("internal: " + e.code) }
    `
    const { stdout: exported } = await run(process.execPath, ["--input-type=module", "-e", probe], app)
    expect(exported.trim().split("\n")).toEqual([
      // The root holds nothing that needs ioredis ...
      "function function object undefined",
      // ... and the Redis module loads without it too: ioredis is only needed to build a backend.
      "RedisBackend: function",
      "internal: ERR_PACKAGE_PATH_NOT_EXPORTED"
    ])

    // 7. with ioredis installed, a Redis program type-checks against the subpath, libraries included
    writeFileSync(join(app, "src", "redis.ts"), redisSource)
    const withoutIoredis = await run(process.execPath, [tsc, "-p", ".", "--noEmit"], app).then(
      () => "",
      (e: Error) => e.message
    )
    expect(withoutIoredis).toMatch(/ioredis/)
    const ioredisRange = rootPackage.devDependencies["ioredis"] ?? "^5.4.0"
    const nodeTypesRange = rootPackage.devDependencies["@types/node"] ?? "^20.0.0"
    // ioredis' declarations name Node's modules, as any Node project's do: its users have @types/node.
    await run(
      npm,
      ["install", "--no-audit", "--no-fund", `ioredis@${ioredisRange}`, `@types/node@${nodeTypesRange}`],
      app
    )
    const tsconfig = JSON.parse(readFileSync(join(app, "tsconfig.json"), "utf8")) as {
      compilerOptions: Record<string, unknown>
    }
    writeFileSync(
      join(app, "tsconfig.json"),
      JSON.stringify({ ...tsconfig, compilerOptions: { ...tsconfig.compilerOptions, types: ["node"] } })
    )
    await run(process.execPath, [tsc, "-p", ".", "--noEmit"], app)
    // Five tsc runs and three npm installs (the CLI's dependencies included): minutes on a loaded machine.
  }, 1_200_000)
})
