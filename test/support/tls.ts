/**
 * Certificates made at test time with `openssl`, in a temporary directory removed afterwards: a
 * CA, a server certificate it signed (for 127.0.0.1 and localhost), a client certificate it signed,
 * and an unrelated CA (the "wrong CA"). Plus a `redis-server` that speaks TLS on a port of its own
 * (its plain port stays for readiness checks and an admin connection).
 */
import { Effect } from "effect"
import type { Scope } from "effect"
import { execFileSync } from "node:child_process"
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import type { RedisServer } from "./redisServer.js"
import { freePort, redisServer } from "./redisServer.js"

export interface Certificates {
  readonly dir: string
  /** PEM contents. */
  readonly ca: string
  readonly wrongCa: string
  readonly clientCert: string
  readonly clientKey: string
  /** Paths, for redis-server's arguments. */
  readonly files: {
    readonly ca: string
    readonly serverCert: string
    readonly serverKey: string
  }
}

const openssl = (dir: string, ...args: Array<string>) => execFileSync("openssl", args, { cwd: dir, stdio: "pipe" })

const makeCa = (dir: string, name: string) =>
  openssl(
    dir,
    "req",
    "-x509",
    "-newkey",
    "rsa:2048",
    "-nodes",
    "-sha256",
    "-days",
    "2",
    "-subj",
    `/CN=${name}`,
    "-keyout",
    `${name}.key`,
    "-out",
    `${name}.crt`
  )

const makeSigned = (dir: string, name: string, extensions: string) => {
  openssl(
    dir,
    "req",
    "-newkey",
    "rsa:2048",
    "-nodes",
    "-sha256",
    "-subj",
    `/CN=${name}`,
    "-keyout",
    `${name}.key`,
    "-out",
    `${name}.csr`
  )
  writeFileSync(join(dir, `${name}.ext`), extensions)
  openssl(
    dir,
    "x509",
    "-req",
    "-in",
    `${name}.csr`,
    "-CA",
    "ca.crt",
    "-CAkey",
    "ca.key",
    "-CAcreateserial",
    "-days",
    "2",
    "-sha256",
    "-extfile",
    `${name}.ext`,
    "-out",
    `${name}.crt`
  )
}

/** Make the certificates in a fresh temporary directory, removed when the scope closes. */
export const certificates: Effect.Effect<Certificates, never, Scope.Scope> = Effect.acquireRelease(
  Effect.sync(() => {
    const dir = mkdtempSync(join(tmpdir(), "effect-lock-tls-"))
    makeCa(dir, "ca")
    makeCa(dir, "wrong-ca")
    makeSigned(dir, "server", "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n")
    makeSigned(dir, "client", "extendedKeyUsage=clientAuth\n")
    const read = (name: string) => readFileSync(join(dir, name), "utf8")
    return {
      dir,
      ca: read("ca.crt"),
      wrongCa: read("wrong-ca.crt"),
      clientCert: read("client.crt"),
      clientKey: read("client.key"),
      files: { ca: join(dir, "ca.crt"), serverCert: join(dir, "server.crt"), serverKey: join(dir, "server.key") }
    }
  }),
  (certs) => Effect.sync(() => rmSync(certs.dir, { recursive: true, force: true }))
)

export interface TlsRedisServer extends RedisServer {
  readonly tlsPort: number
  /** `rediss://127.0.0.1:<tlsPort>` */
  readonly tlsUrl: string
}

/** A redis-server with a TLS port; `authClients` makes it require a client certificate. */
export const tlsRedisServer = (
  certs: Certificates,
  options: { readonly authClients?: boolean | undefined } = {}
): Effect.Effect<TlsRedisServer, Error, Scope.Scope> =>
  Effect.gen(function*() {
    const tlsPort = yield* Effect.promise(freePort)
    const server = yield* redisServer({
      args: [
        "--tls-port",
        String(tlsPort),
        "--tls-cert-file",
        certs.files.serverCert,
        "--tls-key-file",
        certs.files.serverKey,
        "--tls-ca-cert-file",
        certs.files.ca,
        "--tls-auth-clients",
        options.authClients === true ? "yes" : "no"
      ]
    })
    return { ...server, tlsPort, tlsUrl: `rediss://127.0.0.1:${tlsPort}` }
  })
