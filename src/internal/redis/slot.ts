/**
 * Redis Cluster hash slots, computed the way the server computes them (`keyHashSlot` in Redis'
 * cluster.c): the hash tag is the text between the first `{` and the first `}` after it, when
 * that text is not empty; otherwise the whole key is hashed. ioredis' `cluster-key-slot` differs
 * on keys such as `a{}b{c}` (it hashes `c`, Redis hashes the whole key), so the backend does not
 * rely on it to decide which keys share a slot.
 */

const SLOTS = 16384

// CRC16-CCITT (XMODEM), the polynomial Redis Cluster uses.
const table = (() => {
  const t = new Uint16Array(256)
  for (let i = 0; i < 256; i++) {
    let crc = i << 8
    for (let bit = 0; bit < 8; bit++) crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff
    t[i] = crc
  }
  return t
})()

const crc16 = (bytes: Uint8Array, from: number, to: number): number => {
  let crc = 0
  for (let i = from; i < to; i++) crc = ((crc << 8) & 0xffff) ^ (table[((crc >> 8) ^ (bytes[i] ?? 0)) & 0xff] ?? 0)
  return crc
}

const OPEN = 0x7b // {
const CLOSE = 0x7d // }

/** The byte range Redis hashes for `key`: its hash tag, or the whole key. */
const hashedRange = (bytes: Uint8Array): readonly [number, number] => {
  const open = bytes.indexOf(OPEN)
  if (open === -1) return [0, bytes.length]
  const close = bytes.indexOf(CLOSE, open + 1)
  if (close === -1 || close === open + 1) return [0, bytes.length]
  return [open + 1, close]
}

/** The cluster slot of `key`, as Redis computes it (`CLUSTER KEYSLOT`). */
export const hashSlot = (key: string): number => {
  const bytes = Buffer.from(key, "utf8")
  const [from, to] = hashedRange(bytes)
  return crc16(bytes, from, to) % SLOTS
}

// Redisson's RedissonObject.prefixName; any kind without braces gives the same slot.
const companion = (name: string) => name.includes("{") ? `kind:${name}` : `kind:{${name}}`

/**
 * Why the keys Redisson's `prefixName` derives from `name` (`kind:{name}`, or `kind:name` when the
 * name holds a `{`) would not share `name`'s slot, or `undefined` when they do. They share it
 * unless the name has a `{` but no hash tag (an empty one, `a{}b`, or no `}` after the first
 * `{`, `a{b`), or has a `}` but no `{` (`a}b`: the tag of `kind:{a}b}` is `a`).
 */
export const hashTagProblem = (name: string): string | undefined => {
  if (hashSlot(name) === hashSlot(companion(name))) return undefined
  const why = !name.includes("{")
    ? `has a "}" but no "{", so the hash tag of its companion keys (redisson_lock__channel:{${name}}, ...) ends early`
    : name.indexOf("}", name.indexOf("{") + 1) === -1
    ? `has a "{" with no "}" after it, so it has no hash tag while its companion keys do`
    : `has an empty hash tag "{}" first, which Redis ignores (the whole name is hashed)`
  return `${why}: on a Redis Cluster the lock and its companion keys would be in different slots; ` +
    `use a non-empty hash tag such as "{tenant-1}:orders", or no braces at all`
}
