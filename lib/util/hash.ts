import { hash } from 'node:crypto'

export const HASH_CHARS = 22 // 132 bits of SHA-256, base64url

/** SHA-256 by Node's one-shot `crypto.hash`: no Hash object per request, as `createHash` would build (benchmarks/identity-hash.ts times both). */
export function hashValue (value: string): string {
  return hash('sha256', value, 'base64url').slice(0, HASH_CHARS)
}
