/**
 * TLS: `rediss://` URLs and ioredis `tls` options (CA, client certificate, server name) on a real
 * `redis-server --tls-port` with certificates made at test time by openssl (in a temporary
 * directory, removed afterwards). Both connections of a backend (commands and subscriber) go over
 * TLS; a certificate that is not accepted fails the backend at once with a `LockBackendError` that
 * names the server and says "certificate".
 */
import { assert, describe, it } from "@effect/vitest"
import type { Scope } from "effect"
import { Effect, Fiber, Schedule } from "effect"
import type { Redis } from "ioredis"
import { Lock, LockBackend, LockBackendError, withLock } from "../../src/index.js"
import * as RedisBackend from "../../src/RedisBackend.js"
import { skipRedis } from "../support/redisServer.js"
import type { Certificates, TlsRedisServer } from "../support/tls.js"
import { certificates, tlsRedisServer } from "../support/tls.js"
import { admin, clientConnections, cmd, eventually } from "./helpers.js"

/** The backend's connections as the server sees them: the local port each arrived on. */
const localPorts = (redis: Redis) =>
  Effect.map(clientConnections(redis), (lines) => lines.map((line) => Number(/ laddr=[^ ]*:(\d+) /.exec(line)?.[1])))

/** Contention over TLS: a waiter is woken by the release notification (subscriber connection). */
const contend = (server: TlsRedisServer, options: RedisBackend.RedisBackendOptions) =>
  Effect.gen(function*() {
    const redis = yield* admin(server.url)
    const holder = yield* RedisBackend.make(options)
    const waiter = yield* RedisBackend.make(options)
    // Both backends' command and subscriber connections arrived on the TLS port.
    const ports = yield* localPorts(redis)
    assert.deepStrictEqual(ports, [server.tlsPort, server.tlsPort, server.tlsPort, server.tlsPort])

    const key = "tls:contended"
    const release = yield* Effect.makeLatch()
    const held = yield* Effect.makeLatch()
    const first = yield* Effect.fork(
      withLock(key, Effect.zipRight(held.open, release.await)).pipe(Effect.provideService(LockBackend, holder))
    )
    yield* held.await
    let entered = false
    // A retry schedule of a minute: only the release notification can wake this waiter in time.
    const second = yield* Effect.fork(
      withLock(key, (lease) => Effect.sync(() => (entered = true)).pipe(Effect.as(lease.fencingToken)), {
        retry: Schedule.spaced("1 minute")
      }).pipe(Effect.provideService(LockBackend, waiter))
    )
    yield* eventually(
      Effect.map(cmd<Array<string>>(redis, "PUBSUB", "CHANNELS"), (channels) => channels.length === 1),
      10_000,
      "the waiter's subscription"
    )
    assert.isFalse(entered)
    yield* release.open
    yield* Fiber.join(first)
    const token = yield* Fiber.join(second)
    assert.isTrue(entered)
    assert.strictEqual(token, 2n)
    assert.isFalse(yield* Lock.isLocked(key).pipe(Effect.provideService(LockBackend, holder)))
  })

/** `RedisBackend.make` fails: the error, flipped out. */
const refused = (options: RedisBackend.RedisBackendOptions) =>
  Effect.scoped(Effect.flip(RedisBackend.make({ commandTimeout: "60 seconds", ...options })))

const assertCertificateError = (error: unknown, server: TlsRedisServer, also: string) => {
  assert.instanceOf(error, LockBackendError)
  const backendError = error as LockBackendError
  assert.strictEqual(backendError.operation, "connect")
  assert.include(backendError.message, `127.0.0.1:${server.tlsPort}`)
  assert.include(backendError.message, "certificate")
  assert.include(backendError.message, also)
}

describe.skipIf(skipRedis(true))("TLS", () => {
  const withCerts = <A, E>(test: (certs: Certificates) => Effect.Effect<A, E, Scope.Scope>) =>
    Effect.flatMap(certificates, test)

  it.scopedLive(
    "rediss:// with the server's CA: locks, waiters and notifications work over TLS",
    () =>
      withCerts((certs) =>
        Effect.gen(function*() {
          const server = yield* tlsRedisServer(certs)
          yield* contend(server, { url: server.tlsUrl, redis: { tls: { ca: certs.ca } } })
        })
      ),
    30_000
  )

  it.scopedLive(
    "tls options without a URL scheme, with servername: the same",
    () =>
      withCerts((certs) =>
        Effect.gen(function*() {
          const server = yield* tlsRedisServer(certs)
          yield* contend(server, {
            redis: { host: "127.0.0.1", port: server.tlsPort, tls: { ca: certs.ca, servername: "localhost" } }
          })
        })
      ),
    30_000
  )

  it.scopedLive(
    "a wrong CA fails fast with a LockBackendError naming the server and the certificate",
    () =>
      withCerts((certs) =>
        Effect.gen(function*() {
          const server = yield* tlsRedisServer(certs)
          const error = yield* refused({ url: server.tlsUrl, redis: { tls: { ca: certs.wrongCa } } })
          assertCertificateError(error, server, "give the CA that signed it as tls.ca")
          // No CA at all (the system's): the self-signed CA is not trusted either.
          const none = yield* refused({ url: server.tlsUrl })
          assertCertificateError(none, server, "not accepted")
          // Nothing was left connected.
          const redis = yield* admin(server.url)
          yield* eventually(Effect.map(clientConnections(redis), (lines) => lines.length === 0), 5_000, "no connection")
        })
      ),
    30_000
  )

  it.scopedLive(
    "a server name the certificate does not list is refused, naming the certificate",
    () =>
      withCerts((certs) =>
        Effect.gen(function*() {
          const server = yield* tlsRedisServer(certs)
          const error = yield* refused({
            url: server.tlsUrl,
            redis: { tls: { ca: certs.ca, servername: "elsewhere.example" } }
          })
          assertCertificateError(error, server, "tls.servername")
        })
      ),
    30_000
  )

  it.scopedLive(
    "--tls-auth-clients yes: without a client certificate refused, with one both connections work",
    () =>
      withCerts((certs) =>
        Effect.gen(function*() {
          const server = yield* tlsRedisServer(certs, { authClients: true })
          const error = yield* refused({ url: server.tlsUrl, redis: { tls: { ca: certs.ca } } })
          assertCertificateError(error, server, "requires a client certificate")
          yield* contend(server, {
            url: server.tlsUrl,
            redis: { tls: { ca: certs.ca, cert: certs.clientCert, key: certs.clientKey } }
          })
        })
      ),
    30_000
  )
})
