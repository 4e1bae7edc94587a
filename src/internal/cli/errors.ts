/**
 * What the CLI can end with: one exit code per outcome a script may want to tell apart, and the
 * one error type every command fails with (a message for stderr, the code to exit with).
 */
import { Data } from "effect"

/** The exit codes, as `effect-lock --help` lists them under EXIT STATUS. */
export const ExitCode = {
  ok: 0,
  /** Anything unexpected: a Redis error reply, a script that returned something else. */
  failure: 1,
  /** The command line is wrong (an unknown option, a missing argument, `unlock` without `--force`). */
  usage: 2,
  /** `unlock`: there was no lock under the name, nothing was deleted. */
  notLocked: 3,
  /** `unlock`: the confirmation was declined, or could not be asked (no terminal, no `--yes`). */
  notConfirmed: 4,
  /** Redis could not be reached or refused the credentials. */
  unreachable: 5,
  /** The name holds data of another type, not a lock: it was left alone. */
  notALock: 6
} as const

export type ExitCode = (typeof ExitCode)[keyof typeof ExitCode]

/** A command's failure: `message` is printed as one line on stderr, then the process exits with `exitCode`. */
export class CliError extends Data.TaggedError("CliError")<{
  readonly message: string
  readonly exitCode: ExitCode
}> {}
