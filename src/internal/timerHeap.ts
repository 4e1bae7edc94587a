/** A binary min-heap of timers by due time, with removal of any member in O(log n). */

export interface Timer {
  due: number
  /** Position in the heap, -1 when not in it. */
  index: number
}

export class TimerHeap<T extends Timer> {
  private readonly items: Array<T> = []

  get size(): number {
    return this.items.length
  }

  peek(): T | undefined {
    return this.items[0]
  }

  push(item: T): void {
    item.index = this.items.length
    this.items.push(item)
    this.up(item.index)
  }

  pop(): T | undefined {
    const top = this.items[0]
    if (top !== undefined) this.remove(top)
    return top
  }

  remove(item: T): void {
    const i = item.index
    if (i < 0 || this.items[i] !== item) return
    const last = this.items.pop()!
    item.index = -1
    if (last === item) return
    this.items[i] = last
    last.index = i
    this.down(i)
    this.up(last.index)
  }

  private swap(a: number, b: number): void {
    const x = this.items[a]!
    const y = this.items[b]!
    this.items[a] = y
    this.items[b] = x
    x.index = b
    y.index = a
  }

  private up(i: number): void {
    while (i > 0) {
      const parent = (i - 1) >> 1
      if (this.items[parent]!.due <= this.items[i]!.due) return
      this.swap(i, parent)
      i = parent
    }
  }

  private down(i: number): void {
    const n = this.items.length
    while (true) {
      const left = 2 * i + 1
      const right = left + 1
      let smallest = i
      if (left < n && this.items[left]!.due < this.items[smallest]!.due) smallest = left
      if (right < n && this.items[right]!.due < this.items[smallest]!.due) smallest = right
      if (smallest === i) return
      this.swap(i, smallest)
      i = smallest
    }
  }
}
