/**
 * The chaos campaign's CI profile, through its command (`chaos/run.ts`, `nice`d): a short campaign
 * with every fault kind must end with `violations: 0` and exit 0; a deliberately broken variant (a
 * release that deletes the lock without checking its owner) must be caught: a non-zero exit naming
 * the violation. The other broken variant, resources that ignore the fencing token, is caught
 * deterministically in resources.test.ts (in a campaign it takes a paused holder's write to win the
 * race with its watchdog, which it does only now and then). Real redis-server, real PostgreSQL
 * (127.0.0.1:5432; without it the campaign runs on Redis alone, and fails under CI=true).
 */
import { assert, describe, it } from "@effect/vitest"
import { spawn } from "node:child_process"
import { fileURLToPath } from "node:url"
import { skipRedis } from "../support/redisServer.js"

const root = fileURLToPath(new URL("../..", import.meta.url))
const skip = skipRedis(true)

/** Run the chaos command niced; resolves with its exit code and output. */
const chaos = (args: ReadonlyArray<string>): Promise<{ readonly code: number | null; readonly output: string }> =>
  new Promise((resolve, reject) => {
    const child = spawn("nice", ["-n", "10", process.execPath, "--import", "tsx", "chaos/run.ts", ...args], {
      cwd: root,
      stdio: ["ignore", "pipe", "pipe"]
    })
    let output = ""
    child.stdout.on("data", (chunk: Buffer) => (output += chunk.toString()))
    child.stderr.on("data", (chunk: Buffer) => (output += chunk.toString()))
    child.on("error", reject)
    child.on("exit", (code) => resolve({ code, output }))
  })

const lastLine = (output: string) => output.trim().split("\n").at(-1) ?? ""

describe.skipIf(skip)("chaos campaign", () => {
  it("CI profile: every fault kind, 4 workers, 0 violations and every worker back after the nemesis", async () => {
    const { code, output } = await chaos(["--minutes", "0.75", "--seed", "20261130", "--workers", "4"])
    assert.strictEqual(lastLine(output), "violations: 0", output)
    assert.strictEqual(code, 0, output)
    assert.match(output, /^faults: [1-9]/m, output)
    assert.match(output, /^recovery after the nemesis stopped: max \d+ ms/m, output)
  }, 300_000)

  it("catches a release that deletes the lock without checking the owner", async () => {
    const { code, output } = await chaos([
      "--minutes",
      "0.5",
      "--seed",
      "3",
      "--workers",
      "4",
      "--faults",
      "none",
      "--quiet",
      "5",
      // every step goes through the lease's guard: a holder whose lock was deleted is let through
      "--guarded",
      "1",
      "--broken",
      "release"
    ])
    assert.strictEqual(code, 1, output)
    assert.match(lastLine(output), /^violations: [1-9]\d*$/, output)
    assert.match(output, /^FIRST VIOLATION \((unnoticed-loss|uncovered-write|lost-update)\)/m, output)
  }, 300_000)
})
