/** How the CLI prints locks: a table or a key/value block for people, one JSON object per line for scripts. */
import type { LockDescription } from "./client.js"

/** A lock as one line of JSON, fields in the documented order. */
export const json = (lock: LockDescription): string =>
  JSON.stringify({
    key: lock.key,
    kind: lock.kind,
    holders: lock.holders.map(({ count, owner }) => ({ owner, count })),
    ttlMillis: lock.ttlMillis,
    fencingToken: lock.fencingToken,
    waiters: lock.waiters
  })

/** `1.5 s`, `250 ms`, `2 min 5 s`; `-` when there is no expiry. */
export const duration = (millis: number | null): string => {
  if (millis === null) return "-"
  if (millis < 1_000) return `${millis} ms`
  if (millis < 60_000) return `${(millis / 1_000).toFixed(1)} s`
  const minutes = Math.floor(millis / 60_000)
  return `${minutes} min ${Math.floor((millis % 60_000) / 1_000)} s`
}

const holderOf = (lock: LockDescription): string => {
  const [first, ...rest] = lock.holders
  if (first === undefined) return "-"
  return rest.length === 0 ? first.owner : `${first.owner} (+${rest.length} more)`
}

const holdsOf = (lock: LockDescription): string =>
  lock.holders.length === 0 ? "-" : lock.holders.map((holder) => holder.count).join(",")

export const columns = ["KEY", "KIND", "HOLDER", "HOLDS", "TTL", "TOKEN", "WAITERS"] as const

export const row = (lock: LockDescription): ReadonlyArray<string> => [
  lock.key,
  lock.kind,
  holderOf(lock),
  holdsOf(lock),
  lock.holders.length === 0 ? "-" : lock.ttlMillis === null ? "no expiry" : duration(lock.ttlMillis),
  lock.fencingToken ?? "-",
  String(lock.waiters)
]

/** Rows under a header, columns padded to their widest cell. */
export const table = (header: ReadonlyArray<string>, rows: ReadonlyArray<ReadonlyArray<string>>): string => {
  const widths = header.map((title, i) => Math.max(title.length, ...rows.map((cells) => (cells[i] ?? "").length)))
  const line = (cells: ReadonlyArray<string>) =>
    cells.map((cell, i) => cell.padEnd(widths[i] ?? 0)).join("  ").trimEnd()
  return [line(header), ...rows.map(line)].join("\n")
}

/** `inspect` for people: one field a line. */
export const block = (lock: LockDescription): string => {
  const holders = lock.holders.length === 0
    ? ["holder:   none (free)"]
    : lock.holders.map((holder, i) =>
      `${i === 0 ? "holder:  " : "         "} ${holder.owner} (held ${holder.count} time${
        holder.count === 1 ? "" : "s"
      })`
    )
  return [
    `key:      ${lock.key}`,
    `kind:     ${lock.kind}`,
    ...holders,
    `ttl:      ${lock.holders.length === 0 ? "-" : lock.ttlMillis === null ? "no expiry" : duration(lock.ttlMillis)}`,
    `token:    ${lock.fencingToken ?? "- (never taken with fencing)"}`,
    `waiters:  ${lock.waiters}`
  ].join("\n")
}
