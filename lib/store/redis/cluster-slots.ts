import { item } from '../../util/item.js'
/* On a Cluster every key of one script call must live in one slot, which a key's hash tag decides. */

/** The Cluster hash tag of a key (`{...}`), which decides its slot; the key itself when it has none. */
export function hashTag (key: string): string {
  const open = key.indexOf('{')
  if (open !== -1) {
    const close = key.indexOf('}', open + 1)
    if (close > open + 1) return key.slice(open + 1, close)
  }
  return key
}

/** The jobs grouped by hash tag: every key of one call must live in one slot. */
export function bySlot<T extends { keys: readonly string[] }> (jobs: readonly T[]): Iterable<T[]> {
  const groups = new Map<string, T[]>()
  for (const job of jobs) {
    const tag = hashTag(item(job.keys, 0))
    const group = groups.get(tag)
    if (group === undefined) groups.set(tag, [job])
    else group.push(job)
  }
  return groups.values()
}

/** CRC16/XMODEM (poly 0x1021, init 0), the checksum Redis Cluster maps hash tags to slots with. */
export function crc16 (bytes: Uint8Array): number {
  let crc = 0
  for (const byte of bytes) {
    crc ^= byte << 8
    for (let bit = 0; bit < 8; bit++) crc = (crc & 0x8000) !== 0 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff
  }
  return crc
}

const encoder = new TextEncoder()

/** `CLUSTER KEYSLOT`: CRC16 of the hash tag (or the whole key) modulo 16384, on UTF-8 bytes. */
export function keySlot (key: string): number {
  return crc16(encoder.encode(hashTag(key))) % 16384
}
