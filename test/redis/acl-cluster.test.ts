/**
 * Least privilege on a real Redis Cluster (3 masters, 3 replicas): a user created on every node
 * with exactly `RedisBackend.aclRule({ prefix, cluster: true })` runs the conformance suites of
 * every lock kind with nothing refused (`ACL LOG` empty on every node); a user missing any one
 * token of that rule is refused at startup with a `LockBackendError` naming the token (the check
 * asks every master), and the plain rule is refused on a cluster with the sharded commands named.
 */
import { afterAll, assert, beforeAll, describe, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { readFileSync } from "node:fs"
import { Lock, LockBackend, LockBackendError } from "../../src/index.js"
import * as RedisBackend from "../../src/RedisBackend.js"
import { skipCluster } from "../cluster/helpers.js"
import { runFairConformance } from "../conformance/fair.js"
import { runMultiLockConformance } from "../conformance/multiLock.js"
import { runReadWriteConformance } from "../conformance/readWrite.js"
import { runSemaphoreConformance } from "../conformance/semaphore.js"
import { runConformance } from "../conformance/suite.js"
import type { RedisCluster } from "../support/redisCluster.js"
import { startRedisCluster } from "../support/redisCluster.js"

const prefix = "locks:"
const rule = RedisBackend.aclRule({ prefix, cluster: true })
const password = "acl-user-pa55"

const skip = skipCluster()

describe("ACL rule for a cluster", () => {
  it("is the documented one: the plain rule with sharded pub/sub and the cluster client's commands", () => {
    const plain = RedisBackend.aclRule({ prefix })
    const swapped: Record<string, string> = {
      "+subscribe": "+ssubscribe",
      "+unsubscribe": "+sunsubscribe",
      "+publish": "+spublish",
      "+pubsub|numsub": "+pubsub|shardnumsub"
    }
    const expected = plain.map((token) => swapped[token] ?? token)
    expected.splice(2, 0, "+cluster|slots", "+cluster|info", "+readonly")
    assert.deepStrictEqual(rule, expected)
    const docs = readFileSync(new URL("../../docs/redis.md", import.meta.url), "utf8")
    const block =
      /```text\nACL SETUSER effect-lock reset on >a-long-password\n# on every node of a Redis Cluster\n([^`]*)```/
        .exec(docs)?.[1]
    assert.isDefined(block, "the cluster rule's block in docs/redis.md")
    assert.deepStrictEqual(block?.split(/\s+/).filter((t) => t !== ""), [...rule])
  })
})

if (!skip) {
  let cluster: RedisCluster | undefined
  beforeAll(async () => {
    cluster = await startRedisCluster()
  }, 60_000)
  afterAll(() => cluster?.stop())

  const started = () => {
    if (cluster === undefined) throw new Error("the cluster did not start")
    return cluster
  }
  /** `ACL SETUSER name reset on >password ...tokens` on every node, replicas included. */
  const setUser = (name: string, tokens: ReadonlyArray<string>) =>
    Effect.promise(() =>
      Promise.all(
        started().nodes.map((node) =>
          started().node(node.port).call("ACL", "SETUSER", name, "reset", "on", `>${password}`, ...tokens)
        )
      )
    )
  const aclLogs = () =>
    Effect.promise(() =>
      Promise.all(
        started().nodes.map((node) => started().node(node.port).call("ACL", "LOG") as Promise<Array<unknown>>)
      )
    )
  const resetAclLogs = Effect.promise(() =>
    Promise.all(started().nodes.map((node) => started().node(node.port).call("ACL", "LOG", "RESET")))
  )
  const options = (name: string) => ({
    prefix,
    cluster: { nodes: started().nodes, options: { redisOptions: { username: name, password } } }
  })

  const asUser = Layer.unwrapScoped(Effect.gen(function*() {
    yield* setUser("effect-lock", rule)
    return RedisBackend.layer(options("effect-lock"))
  }))
  describe("as an ACL user with exactly the cluster rule", () => {
    beforeAll(() => Effect.runPromise(resetAclLogs))
    runConformance("redis cluster as an ACL user with exactly the cluster rule", asUser)
    runSemaphoreConformance("redis cluster as an ACL user with exactly the cluster rule", asUser)
    runMultiLockConformance("redis cluster as an ACL user with exactly the cluster rule", asUser, { together: false })
    runFairConformance("redis cluster as an ACL user with exactly the cluster rule", asUser)
    runReadWriteConformance("redis cluster as an ACL user with exactly the cluster rule", asUser)
    it.effect("nothing was refused on any node (ACL LOG empty)", () =>
      Effect.gen(function*() {
        const logs = yield* aclLogs()
        assert.deepStrictEqual(logs.map((log) => log.length), [0, 0, 0, 0, 0, 0], JSON.stringify(logs))
      }))
  })

  describe("every token of the cluster rule is needed and named when missing", () => {
    const refusal = (name: string, tokens: ReadonlyArray<string>) =>
      Effect.gen(function*() {
        yield* setUser(name, tokens)
        return yield* Effect.scoped(Effect.flip(RedisBackend.make(options(name))))
      })

    rule.forEach((token, i) => {
      it.scopedLive(`without ${token}: the backend refuses to start and names it`, () =>
        Effect.gen(function*() {
          const error = yield* refusal(`without-${i}`, rule.filter((t) => t !== token))
          assert.instanceOf(error, LockBackendError)
          assert.include(error.message, token)
        }))
    })

    it.scopedLive("the plain rule (with the cluster client's commands) is refused on a cluster, with the sharded commands named", () =>
      Effect.gen(function*() {
        const error = yield* refusal("plain", [
          ...RedisBackend.aclRule({ prefix }),
          "+cluster|slots",
          "+cluster|info",
          "+readonly"
        ])
        assert.instanceOf(error, LockBackendError)
        for (const token of ["+ssubscribe", "+sunsubscribe", "+spublish", "+pubsub|shardnumsub"]) {
          assert.include(error.message, token)
        }
        assert.include(error.message, "RedisBackend.aclRule({ prefix: \"locks:\", cluster: true })")
      }))

    it.scopedLive("a token missing on one master only is named with that master", () =>
      Effect.gen(function*() {
        yield* setUser("one-short", rule)
        const topology = yield* Effect.promise(() => started().topology())
        const master = topology.find((node) => node.role === "master")!
        yield* Effect.promise(() => started().node(master.port).call("ACL", "SETUSER", "one-short", "-time"))
        const error = yield* Effect.scoped(Effect.flip(RedisBackend.make(options("one-short"))))
        assert.instanceOf(error, LockBackendError)
        assert.include(error.message, `on 127.0.0.1:${master.port}`)
        assert.include(error.message, "+time")
      }))

    it.scopedLive("with the rule a lock is taken and released through the user", () =>
      Effect.gen(function*() {
        yield* setUser("works", rule)
        const backend = yield* RedisBackend.make(options("works"))
        const token = yield* Lock.withLock("acl-works", (lease) => Effect.succeed(lease.fencingToken)).pipe(
          Effect.provideService(LockBackend, backend)
        )
        assert.strictEqual(token, 1n)
      }))
  })
}
