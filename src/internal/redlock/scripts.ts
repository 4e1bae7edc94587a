/** Redlock's own script: raising a node's fencing counter to the token a grant gave out. */
import { defineScript } from "../redis/scripts.js"

export const raiseToken = defineScript({
  name: "raise-token",
  encode: (tokenKey: string, token: bigint) => [[tokenKey], [token.toString()]] as const,
  decode: (reply): boolean | undefined => reply === 1 ? true : reply === 0 ? false : undefined
})
