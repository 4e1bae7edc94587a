/**
 * The Redis and cluster suites again, with `ioredis` resolved to ioredis 6 (the dev dependency
 * `ioredis6`, an npm alias of ioredis@6): the backend's own connections (`import("ioredis")` in
 * src/internal/redis/connection.ts), the tests' admin clients and the user-built clients are all
 * ioredis 6, whose default protocol is RESP3. `npm run test:ioredis6`.
 */
import { defineConfig } from "vitest/config"
import base from "./vitest.config.js"

// Not mergeConfig: it would append this include list to the base one and run every test.
export default defineConfig({
  ...base,
  resolve: { alias: [{ find: /^ioredis$/, replacement: "ioredis6" }] },
  test: {
    ...base.test,
    env: { VITEST_IOREDIS_MAJOR: "6" },
    include: [
      "test/ioredis-version.test.ts",
      "test/redis/conformance.test.ts",
      "test/redis/redisson-interop.test.ts",
      "test/redis/hand-over.test.ts",
      "test/cluster/backend.test.ts",
      "test/cluster/conformance.test.ts",
      "test/cluster/failover.test.ts",
      "test/cluster/migration.test.ts",
      "test/cluster/redisson-interop.test.ts",
      "test/redis/replica-sync.test.ts",
      "test/sentinel/sentinel.test.ts",
      "test/sentinel/failover.test.ts"
    ]
  }
})
