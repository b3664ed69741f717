import type { RecordHash, RecordsRead } from '../port.js'

/* A records hash in this process (port.ts RecordHash), on the memory store's clock. */
export class MemoryRecords implements RecordHash {
  readonly #fields = new Map<string, string>()
  readonly #clock: () => number

  constructor (clock: () => number) {
    this.#clock = clock
  }

  async read (): Promise<RecordsRead> {
    return { fields: new Map(this.#fields), at: this.#clock() }
  }

  now (): number {
    return this.#clock()
  }

  async stamp (): Promise<number> {
    return this.#clock()
  }

  async write (id: string, json: string): Promise<void> {
    this.#fields.set(id, json)
  }

  async remove (id: string): Promise<boolean> {
    return this.#fields.delete(id)
  }

  async removeLapsed (id: string, json: string, expiresAt: number): Promise<boolean> {
    return this.#fields.get(id) === json && expiresAt <= this.#clock() && this.#fields.delete(id)
  }
}
