/**
 * Any unhandled rejection or uncaught exception fails the run: the library promises none.
 * vitest already reports them as errors (and fails the run); this hook also records them so a
 * test can assert that a scenario produced none.
 */
export const unhandled: Array<unknown> = []

process.on("unhandledRejection", (reason) => {
  unhandled.push(reason)
  throw reason
})
process.on("uncaughtException", (error) => {
  unhandled.push(error)
  throw error
})
