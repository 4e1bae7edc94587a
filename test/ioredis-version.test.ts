/**
 * Which ioredis the Redis suites run on: 5 under the default configuration, 6 under
 * vitest.ioredis6.config.ts (`npm run test:ioredis6`), where `ioredis` is aliased to the
 * `ioredis6` dev dependency. Fails if the alias stops working, so the ioredis 6 run cannot
 * silently test ioredis 5 again.
 */
import { assert, describe, it } from "@effect/vitest"
import { Redis } from "ioredis"
import { createRequire } from "node:module"

const require = createRequire(import.meta.url)

describe("ioredis version under test", () => {
  it("is the major this configuration asks for", () => {
    const expected = process.env.VITEST_IOREDIS_MAJOR ?? "5"
    const five = require("ioredis/package.json") as { version: string }
    const six = require("ioredis6/package.json") as { version: string }
    const versionOf = (ctor: unknown) =>
      ctor === (require("ioredis6") as { Redis: unknown }).Redis ? six.version : five.version
    assert.strictEqual(versionOf(Redis).split(".")[0], expected)
  })
})
