/**
 * The command budget's deadlines where ioredis does not time commands itself (a cluster, an
 * external client without `commandTimeout`): one queue per connection, served by one Node timer.
 */

/**
 * The calls' deadlines, all `commandTimeout` after their start: the order they are added in is
 * the order they fall due, so one Node timer, armed for the oldest, serves them all. A call that
 * settles in time cancels its deadline (the oldest ones are then dropped at once; the usual
 * case, as replies come back in order); the timer fires at most once per `commandTimeout` while
 * calls keep coming, and then moves to the oldest deadline still pending.
 */
/** One call's deadline: `fire` fails the call; cleared once it settled or fired. */
export interface Deadline {
  readonly at: number
  fire: (() => void) | undefined
}

export const makeDeadlines = (commandTimeout: number) => {
  let queue: Array<Deadline> = []
  let head = 0
  let timer: ReturnType<typeof setTimeout> | undefined
  let closed = false
  const dropSettled = () => {
    while (queue[head]?.fire === undefined && head < queue.length) head++
    if (head === queue.length) {
      queue = []
      head = 0
    } else if (head >= 1024 && head * 2 >= queue.length) {
      queue = queue.slice(head)
      head = 0
    }
  }
  const arm = () => {
    const next = queue[head]
    if (timer !== undefined || next === undefined) return
    timer = setTimeout(expire, Math.max(1, Math.ceil(next.at - performance.now())))
    // Once the backend is closed, a call still pending keeps no process alive.
    if (closed) timer.unref()
  }
  // The timer fires in the event loop's timers phase, before the poll phase reads the sockets: a
  // reply that arrived while the process was busy (say, starting ten thousand waiters) is still
  // unread. The deadlines that are due fail one step later (setImmediate runs after that poll
  // phase), so such a reply wins: a budget is never cut short by the process's own delay.
  const expire = () => {
    const immediate = setImmediate(fireDue)
    if (closed) immediate.unref()
  }
  const fireDue = () => {
    timer = undefined
    const now = performance.now()
    for (let deadline = queue[head]; deadline !== undefined; deadline = queue[head]) {
      if (deadline.fire !== undefined && deadline.at > now) break
      head++
      const fire = deadline.fire
      deadline.fire = undefined
      fire?.()
    }
    dropSettled()
    arm()
  }
  return {
    add: (fire: () => void): Deadline => {
      const deadline: Deadline = { at: performance.now() + commandTimeout, fire }
      queue.push(deadline)
      arm()
      return deadline
    },
    cancel: (deadline: Deadline) => {
      deadline.fire = undefined
      dropSettled()
    },
    close: () => {
      closed = true
      timer?.unref()
    }
  }
}
