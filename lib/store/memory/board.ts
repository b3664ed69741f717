import type { AuditTrail, PictureBoard } from '../port.js'

/* The fleet's pictures and the audit trail in this process (port.ts), on the memory store's clock. */

export class MemoryBoard implements PictureBoard {
  readonly #pictures = new Map<string, { json: string, lapsesAt: number }>()
  readonly #clock: () => number

  constructor (clock: () => number) {
    this.#clock = clock
  }

  async publish (id: string, json: string, ttlMs: number): Promise<number> {
    const now = this.#clock()
    this.#pictures.set(id, { json, lapsesAt: now + ttlMs })
    for (const [other, { lapsesAt }] of this.#pictures) if (lapsesAt <= now) this.#pictures.delete(other)
    return now
  }

  async withdraw (id: string): Promise<void> {
    this.#pictures.delete(id)
  }

  async read (): Promise<{ pictures: Map<string, string>, at: number }> {
    const at = this.#clock()
    const pictures = new Map<string, string>()
    for (const [id, { json, lapsesAt }] of this.#pictures) if (lapsesAt > at) pictures.set(id, json)
    return { pictures, at }
  }
}

export class MemoryAudit implements AuditTrail {
  #entries: string[] = []
  readonly #max: number

  constructor (max: number) {
    this.#max = max
  }

  async add (json: string): Promise<void> {
    this.#entries.push(json)
    if (this.#entries.length > this.#max) this.#entries = this.#entries.slice(-this.#max)
  }

  async recent (count: number): Promise<string[]> {
    return this.#entries.slice(-count).reverse()
  }
}
