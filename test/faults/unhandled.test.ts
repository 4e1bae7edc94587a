/**
 * Scenario 8: no unhandled rejection or uncaught exception anywhere in the suite. The setup file
 * test/support/failOnUnhandled.ts turns one into a failed run (and records it, for the fault tests'
 * own `unhandled` checks). These tests prove both halves: child vitest runs with the same setup
 * over a fixture that leaves an unhandled rejection or an uncaught exception behind fail, while the
 * same runs without the hook pass; and the array the fault tests check is the one the hook fills.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { execFile } from "node:child_process"
import { fileURLToPath } from "node:url"
import { unhandled } from "../support/failOnUnhandled.js"

const root = fileURLToPath(new URL("../..", import.meta.url))
const vitest = fileURLToPath(new URL("../../node_modules/vitest/vitest.mjs", import.meta.url))
const config = fileURLToPath(new URL("./fixtures/vitest.config.ts", import.meta.url))

interface ChildRun {
  readonly code: number
  readonly output: string
}

/** Run the fixture in a child vitest; `kind` is what it leaves behind, `hook` whether the setup file is on. */
const runFixture = (kind: "rejection" | "exception" | "nothing", hook: "on" | "off") =>
  Effect.async<ChildRun>((resume) => {
    // The child is a vitest run of its own, not a worker of this one.
    const env = Object.fromEntries(
      Object.entries(process.env).filter(([name]) => !name.startsWith("VITEST") && name !== "TEST")
    )
    const child = execFile(
      process.execPath,
      [vitest, "run", "--config", config],
      { cwd: root, env: { ...env, FAULT_KIND: kind, FAULT_HOOK: hook, NO_COLOR: "1", CI: "" }, timeout: 60_000 },
      (error, stdout, stderr) => {
        const code = error === null ? 0 : typeof error.code === "number" ? error.code : 1
        resume(Effect.succeed({ code, output: `${stdout}\n${stderr}` }))
      }
    )
    return Effect.sync(() => child.kill("SIGKILL"))
  })

describe("faults: nothing goes unhandled", () => {
  it.live(
    "the hook fails a run that leaves an unhandled rejection or an uncaught exception; without it the same run passes",
    () =>
      Effect.gen(function*() {
        const [rejection, exception, clean, rejectionNoHook, exceptionNoHook] = yield* Effect.all([
          runFixture("rejection", "on"),
          runFixture("exception", "on"),
          runFixture("nothing", "on"),
          runFixture("rejection", "off"),
          runFixture("exception", "off")
        ], { concurrency: "unbounded" })

        assert.notStrictEqual(rejection.code, 0, rejection.output)
        assert.include(rejection.output, "fixture: an unhandled rejection")
        assert.notStrictEqual(exception.code, 0, exception.output)
        assert.include(exception.output, "fixture: an uncaught exception")
        // Controls: the fixture passes when it leaves nothing behind, and, with vitest's own check
        // switched off, a run with the fault but without the hook passes: the failure is the hook's.
        assert.strictEqual(clean.code, 0, clean.output)
        assert.strictEqual(rejectionNoHook.code, 0, rejectionNoHook.output)
        assert.strictEqual(exceptionNoHook.code, 0, exceptionNoHook.output)
      }),
    120_000
  )

  it("the `unhandled` array the fault tests check is the one the hook records into", () => {
    const hooks = process.listeners("unhandledRejection").filter((listener) =>
      listener.toString().includes("unhandled.push")
    )
    assert.strictEqual(hooks.length, 1, "the setup file's hook is installed once")
    const reason = new Error("recorded, not thrown")
    const before = unhandled.length
    try {
      hooks[0]!(reason, Promise.resolve())
      assert.fail("the hook rethrows")
    } catch (error) {
      assert.strictEqual(error, reason)
    }
    assert.strictEqual(unhandled[before], reason)
    unhandled.splice(before, 1)
    assert.deepStrictEqual(unhandled, [])
  })
})
