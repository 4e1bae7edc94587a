/**
 * A redis-server whose wall clock the test can step: libfaketime (Debian's `faketime` package)
 * preloaded into the server, reading its offset from a file on every clock call
 * (`FAKETIME_TIMESTAMP_FILE`, `FAKETIME_NO_CACHE=1`), so writing `+60` to the file steps that
 * server's clock a minute forward at once, as `date -s` or an NTP step would. The monotonic clock
 * is left alone (`FAKETIME_DONT_FAKE_MONOTONIC=1`): a step moves only the wall clock.
 *
 * Debian's redis-server is linked against the shared libjemalloc, which deadlocks libfaketime's
 * start-up (jemalloc calls `clock_gettime` while libfaketime is still resolving its symbols;
 * libfaketime issues #130 and #327). Preloading another allocator first (mimalloc or tcmalloc,
 * both Debian packages) keeps jemalloc out of the way. `.ci/run` installs `faketime` and
 * `libmimalloc2.0`.
 */
import type { Scope } from "effect"
import { Effect } from "effect"
import { existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"

/** The first of `names` found in /usr/lib, /usr/lib64, /usr/local/lib or their multiarch folders. */
const findLibrary = (...names: ReadonlyArray<string>): string | undefined => {
  const roots = ["/usr/lib", "/usr/lib64", "/usr/local/lib"]
  const dirs = roots.flatMap((root) => {
    let entries: Array<string> = []
    try {
      entries = readdirSync(root).filter((entry) => entry.endsWith("-linux-gnu")).map((entry) => join(root, entry))
    } catch {
      // no such folder
    }
    return [root, ...entries]
  })
  for (const dir of dirs) {
    for (const name of names) {
      const path = join(dir, name)
      if (existsSync(path)) return path
    }
  }
  return undefined
}

export const libfaketime = findLibrary("faketime/libfaketime.so.1", "libfaketime.so.1")
const allocator = findLibrary("libmimalloc.so.2", "libtcmalloc_minimal.so.4")

/**
 * Call once at the top of a test file that steps a server's clock. Returns `true` when its tests
 * should be skipped (said loudly); fails the run instead under `CI=true`.
 */
export const skipFaketime = (): boolean => {
  if (libfaketime !== undefined && allocator !== undefined) return false
  const why = libfaketime === undefined
    ? "libfaketime is not installed (apt-get install faketime)"
    : "neither mimalloc nor tcmalloc is installed (apt-get install libmimalloc2.0)"
  if (process.env.CI === "true") throw new Error(`clock-step tests cannot run under CI=true: ${why}`)
  console.warn(`\n${"!".repeat(78)}\n!!! SKIPPING CLOCK-STEP TESTS: ${why}\n${"!".repeat(78)}\n`)
  return true
}

export interface FakeClock {
  /** The environment to start redis-server with. */
  readonly env: Readonly<Record<string, string>>
  /** Step the server's wall clock to `seconds` ahead of the real one (from now on, at once). */
  readonly setOffset: (seconds: number) => Effect.Effect<void>
}

/** An offset file (starting at +0) and the environment that points libfaketime at it. */
export const fakeClock: Effect.Effect<FakeClock, never, Scope.Scope> = Effect.acquireRelease(
  Effect.sync(() => {
    const dir = mkdtempSync(join(tmpdir(), "effect-lock-faketime-"))
    const file = join(dir, "offset")
    writeFileSync(file, "+0\n")
    const clock: FakeClock & { readonly dir: string } = {
      dir,
      env: {
        LD_PRELOAD: [allocator ?? "", libfaketime ?? ""].filter((path) => path !== "").join(" "),
        FAKETIME_TIMESTAMP_FILE: file,
        FAKETIME_NO_CACHE: "1",
        FAKETIME_DONT_FAKE_MONOTONIC: "1"
      },
      setOffset: (seconds) => Effect.sync(() => writeFileSync(file, `${seconds >= 0 ? "+" : ""}${seconds}\n`))
    }
    return clock
  }),
  (clock) => Effect.sync(() => rmSync(clock.dir, { recursive: true, force: true }))
)
