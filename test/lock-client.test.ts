/**
 * The promise-facing client: what an Express handler or a queue consumer sees. Errors are the
 * library's own classes (or exactly what the function threw), the signal aborts on loss, and
 * closing the client releases what it holds.
 */
import { execFile } from "node:child_process"
import { mkdirSync, writeFileSync } from "node:fs"
import { join, resolve } from "node:path"
import { fileURLToPath } from "node:url"
import { promisify } from "node:util"
import { describe, expect, it } from "vitest"
import { LockClient, LockLostError, LockOptionsError, LockTimeoutError, MemoryBackend } from "../src/index.js"

describe("LockClient", () => {
  it("resolves with the function's result, with the lease", async () => {
    const locks = LockClient.make(MemoryBackend.layer)
    const token = await locks.using("k", async (_signal, lease) => lease.fencingToken)
    const again = await locks.using("k", { lease: "5 seconds" }, async (_signal, lease) => lease.fencingToken)
    expect([token, again]).toEqual([1n, 2n])
    await locks.close()
  })

  it("rejects with the lock's own error classes", async () => {
    const locks = LockClient.make(MemoryBackend.layer)
    let release!: () => void
    const held = new Promise<void>((resolve) => release = resolve)
    const holder = locks.using("busy", () => held)
    await new Promise((resolve) => setTimeout(resolve, 20))
    const timeout = await locks.using("busy", { wait: 0 }, async () => "in").catch((e: unknown) => e)
    expect(timeout).toBeInstanceOf(LockTimeoutError)
    expect((timeout as LockTimeoutError)._tag).toBe("LockTimeoutError")
    expect((timeout as LockTimeoutError).reason).toBe("wait-elapsed")
    const bad = await locks.using("", async () => "in").catch((e: unknown) => e)
    expect(bad).toBeInstanceOf(LockOptionsError)
    release()
    await holder
    await locks.close()
  })

  it("rejects with exactly what the function threw, and releases", async () => {
    const locks = LockClient.make(MemoryBackend.layer)
    const thrown = new RangeError("out of stock")
    const error = await locks.using("k", async () => {
      throw thrown
    }).catch((e: unknown) => e)
    expect(error).toBe(thrown)
    expect(await locks.using("k", { wait: 0 }, async () => "free again")).toBe("free again")
    await locks.close()
  })

  it("aborts the signal when the lock is lost, and rejects with LockLostError", async () => {
    const locks = LockClient.make(MemoryBackend.layer)
    let aborted = false
    const error = await locks.using("k", { lease: "100 millis", renew: false }, (signal) =>
      new Promise((_, reject) => {
        signal.addEventListener("abort", () => {
          aborted = true
          reject(signal.reason)
        })
      })).catch((e: unknown) => e)
    expect(aborted).toBe(true)
    expect(error).toBeInstanceOf(LockLostError)
    expect((error as LockLostError).reason).toBe("expired")
    await locks.close()
  })

  it("close() aborts the work in flight, releases it, and refuses new work", async () => {
    const locks = LockClient.make(MemoryBackend.layer)
    let signalAborted = false
    const working = locks.using("k", (signal) =>
      new Promise((resolve) => {
        signal.addEventListener("abort", () => {
          signalAborted = true
          resolve("stopped")
        })
      }))
    await new Promise((resolve) => setTimeout(resolve, 20))
    await locks.close()
    const outcome = await working.catch((e: unknown) => e)
    expect(signalAborted).toBe(true)
    expect(outcome).toBeInstanceOf(DOMException)
    expect((outcome as DOMException).name).toBe("AbortError")
    const late = await locks.using("k", async () => "late").catch((e: unknown) => e)
    expect((late as DOMException).name).toBe("AbortError")
  })

  it("an async function given to withLock is a type error that says what to do", async () => {
    const root = resolve(fileURLToPath(import.meta.url), "..", "..")
    const dir = join(root, ".scratch", "type-errors")
    mkdirSync(dir, { recursive: true })
    writeFileSync(
      join(dir, "async-program.ts"),
      `import { withLock } from ${
        JSON.stringify(join(root, "src", "index.js"))
      }\nexport const bad = withLock("k", async (lease) => lease.fencingToken)\n`
    )
    const tsc = join(root, "node_modules", "typescript", "bin", "tsc")
    const args = [
      tsc,
      "--noEmit",
      "--strict",
      "--module",
      "nodenext",
      "--moduleResolution",
      "nodenext",
      "--target",
      "es2022",
      "--skipLibCheck",
      "--types",
      "node",
      join(dir, "async-program.ts")
    ]
    const output = await promisify(execFile)(process.execPath, args, { cwd: root }).then(
      () => "",
      (e: { stdout?: string }) => e.stdout ?? ""
    )
    expect(output).toMatch(/withLock runs an Effect, not an async function/)
    expect(output).toMatch(/LockClient\.make\(layer\)\.using/)
  }, 60_000)
})

describe("LockClient defaults", () => {
  it("waits at most 10 seconds by default (a promise cannot be interrupted); wait: Infinity waits on", async () => {
    expect(LockClient.DEFAULT_WAIT).toBe("10 seconds")
    const locks = LockClient.make(MemoryBackend.layer)
    let release!: () => void
    const holder = locks.using("k", () => new Promise<void>((resolve) => release = resolve))
    await new Promise((resolve) => setTimeout(resolve, 20))
    const timedOut = locks.using("k", { retry: undefined }, async () => "in").catch((e: unknown) => e)
    // not a timing assertion on the library: a bound for the test itself, far above 10 s
    const error = await Promise.race([
      timedOut,
      new Promise((resolve) => setTimeout(() => resolve("still waiting"), 30_000))
    ])
    expect(error).toBeInstanceOf(LockTimeoutError)
    expect((error as LockTimeoutError).waitedMillis).toBeGreaterThanOrEqual(10_000)
    const unlimited = locks.using("k", { wait: Infinity }, async () => "in after the holder")
    release()
    await holder
    expect(await unlimited).toBe("in after the holder")
    await locks.close()
  }, 60_000)
})
