/**
 * The chaos campaign's TCP proxy (test/support/tcpProxy.ts) in front of a real redis-server: order
 * is kept under latency, half-open lets commands run while their replies are lost, heal resets the
 * connections that lost bytes, and new connections work again.
 */
import { assert, describe, it } from "@effect/vitest"
import { Redis } from "ioredis"
import { type RedisServer, skipRedis, startRedisServer } from "../support/redisServer.js"
import { startTcpProxy, type TcpProxy } from "../support/tcpProxy.js"

const skip = skipRedis(true)

const withProxy = async (body: (proxy: TcpProxy, server: RedisServer, admin: Redis) => Promise<void>) => {
  const server = await startRedisServer()
  const proxy = await startTcpProxy(server.port)
  const admin = new Redis(server.url, { lazyConnect: true })
  try {
    await body(proxy, server, admin)
  } finally {
    admin.disconnect()
    await proxy.close()
    await server.stop()
  }
}

const client = (proxy: TcpProxy) =>
  new Redis(proxy.port, "127.0.0.1", { maxRetriesPerRequest: 0, retryStrategy: () => null }).on("error", () => {})

const closed = (redis: Redis) => new Promise<void>((resolve) => redis.once("end", () => resolve()))

describe.skipIf(skip)("chaos TCP proxy", () => {
  it("keeps the order of replies under latency", async () => {
    await withProxy(async (proxy) => {
      const redis = client(proxy)
      try {
        await redis.ping()
        proxy.latency(5)
        const replies = await Promise.all(Array.from({ length: 50 }, () => redis.incr("n")))
        assert.deepStrictEqual(replies, Array.from({ length: 50 }, (_, i) => i + 1))
        proxy.heal()
        assert.strictEqual(await redis.get("n"), "50")
      } finally {
        redis.disconnect()
      }
    })
  })

  it("half-open: the command runs, its reply is lost; heal resets that connection and new ones work", async () => {
    await withProxy(async (proxy, _server, admin) => {
      const redis = client(proxy)
      await redis.ping()
      proxy.halfOpen()
      const pending = redis.set("k", "v").then(() => "answered", () => "failed")
      // the server ran it
      while ((await admin.get("k")) !== "v") await new Promise((resolve) => setTimeout(resolve, 10))
      const end = closed(redis)
      proxy.heal()
      await end
      assert.strictEqual(await pending, "failed")
      const again = client(proxy)
      try {
        assert.strictEqual(await again.get("k"), "v")
      } finally {
        again.disconnect()
      }
    })
  })

  it("cut resets every connection", async () => {
    await withProxy(async (proxy) => {
      const redis = client(proxy)
      await redis.ping()
      assert.strictEqual(proxy.connections(), 1)
      const end = closed(redis)
      proxy.cut()
      await end
      assert.strictEqual(proxy.connections(), 0)
    })
  })
})
