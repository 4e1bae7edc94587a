/**
 * Secrets never leave: with a password in the URL (a `requirepass` server and an ACL user), one
 * succeeding run (a contended lock, a renewal, a release) and failing runs (a wrong password, an
 * ACL user missing a permission, a permission revoked mid-run) are captured whole: every log line
 * (all levels), every span with its attributes and events (a recording tracer), the metrics
 * snapshot with its tags, and every error with its message, string form, JSON, `inspect` output
 * and cause chain. None of it may contain the password or the URL that carries it.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Fiber, Layer, Logger, LogLevel, Metric, Redacted, Tracer } from "effect"
import { inspect } from "node:util"
import { Lock, withLock } from "../../src/index.js"
import * as RedisBackend from "../../src/RedisBackend.js"
import { redisServer, skipRedis } from "../support/redisServer.js"
import { admin, cmd } from "./helpers.js"

const password = "Sup3r-s3cret-ACL-pa55word"
const adminPassword = "Adm1n-s3cret-requirepass"

/** Everything a run emits, as text. */
const capture = () => {
  const texts: Array<string> = []
  const logger = Logger.make((options) => {
    texts.push(
      Logger.logfmtLogger.log(options),
      inspect(options.message, { depth: 10 }),
      inspect(options.cause, { depth: 10 })
    )
  })
  const base = Effect.runSync(Effect.tracer)
  const spans: Array<Tracer.Span> = []
  const tracer = Tracer.make({
    span: (...args) => {
      const span = base.span(...args)
      spans.push(span)
      return span
    },
    context: (f) => f()
  })
  const run = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
    effect.pipe(
      Effect.provide(Logger.replace(Logger.defaultLogger, logger)),
      Logger.withMinimumLogLevel(LogLevel.All),
      Effect.withTracer(tracer)
    )
  const everything = () => {
    for (const span of spans) texts.push(inspect(span, { depth: 10 }), inspect([...span.attributes], { depth: 10 }))
    for (const pair of Metric.unsafeSnapshot()) texts.push(inspect(pair, { depth: 10 }))
    return texts.join("\n")
  }
  return { run, texts, everything }
}

/** An error in every form a program may print or ship it. */
const errorTexts = (error: unknown): ReadonlyArray<string> => {
  const texts = [String(error), inspect(error, { depth: 20 }), JSON.stringify(error)]
  let cause: unknown = error
  for (let depth = 0; depth < 10 && cause instanceof Error; depth++) {
    texts.push(cause.message, String(cause.stack), inspect(cause, { depth: 20 }))
    cause = (cause as { cause?: unknown }).cause
  }
  return texts
}

const assertClean = (text: string) => {
  assert.notInclude(text, password)
  assert.notInclude(text, adminPassword)
}

describe.skipIf(skipRedis(true))("secrets", () => {
  it.scopedLive("a succeeding and several failing runs emit no password anywhere", () =>
    Effect.gen(function*() {
      const server = yield* redisServer({ args: ["--requirepass", adminPassword] })
      const redis = yield* admin(`redis://:${adminPassword}@127.0.0.1:${server.port}`)
      const prefix = "locks:"
      yield* cmd(redis, "ACL", "SETUSER", "app", "reset", "on", `>${password}`, ...RedisBackend.aclRule({ prefix }))
      const url = (user: string, pass: string) => Redacted.make(`redis://${user}:${pass}@127.0.0.1:${server.port}`)
      const { everything, run } = capture()
      const errors: Array<unknown> = []

      // Succeeding: a contended lock (a waiter, a hand-over), a renewal, a release.
      yield* run(Effect.scoped(Effect.gen(function*() {
        const layer = yield* Layer.build(RedisBackend.layer({ url: url("app", password), prefix }))
        const program = Effect.gen(function*() {
          const holder = yield* Effect.fork(withLock("k", Effect.sleep("400 millis"), { lease: "300 millis" }))
          yield* Effect.sleep("50 millis")
          yield* withLock("k", Effect.void)
          yield* Fiber.join(holder)
        })
        yield* Effect.provide(program, layer)
      })))

      // Failing: a wrong password.
      const wrong = yield* run(
        Effect.exit(Effect.scoped(Layer.build(RedisBackend.layer({ url: url("app", `${password}-wrong`), prefix }))))
      )
      assert.isTrue(Exit.isFailure(wrong))
      if (Exit.isFailure(wrong)) errors.push(wrong.cause, ...(wrong.cause._tag === "Fail" ? [wrong.cause.error] : []))

      // Failing: a user missing a permission (refused at startup).
      yield* cmd(redis, "ACL", "SETUSER", "app", "-publish")
      const refused = yield* run(Effect.flip(Effect.scoped(RedisBackend.make({ url: url("app", password), prefix }))))
      errors.push(refused)
      yield* cmd(redis, "ACL", "SETUSER", "app", "+publish")

      // Failing: a permission revoked while running (the acquire is refused, the release logged).
      const revoked = yield* run(Effect.scoped(Effect.gen(function*() {
        const layer = yield* Layer.build(RedisBackend.layer({ url: url("app", password), prefix }))
        yield* cmd(redis, "ACL", "SETUSER", "app", "-hincrby")
        return yield* Effect.flip(Effect.provide(Lock.withLock("r")(Effect.void), layer))
      })))
      errors.push(revoked)

      for (const error of errors) for (const text of errorTexts(error)) assertClean(text)
      const all = everything()
      assertClean(all)
      // The capture did see the runs (so a clean scan means something).
      assert.include(all, "effect-lock.acquire")
      assert.match(errors.flatMap(errorTexts).join("\n"), /WRONGPASS|invalid username-password/)
      assert.include(errorTexts(refused).join("\n"), "+publish")
      assert.include(errorTexts(revoked).join("\n"), "lacks an ACL permission")
    }), 60_000)
})
