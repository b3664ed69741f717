import { parseList } from 'structured-headers'

/** One member of a RateLimit or RateLimit-Policy field, as a client parses it (RFC 9651). */
export interface FieldItem { name: string, q?: number, w?: number, r?: number, t?: number }

/** The members of a RateLimit / RateLimit-Policy field value; [] when the field is absent. */
export function parseFields (value: unknown): FieldItem[] {
  if (typeof value !== 'string') return []
  return parseList(value).map(([item, params]) => ({
    name: String(item),
    q: params.get('q') as number | undefined,
    w: params.get('w') as number | undefined,
    r: params.get('r') as number | undefined,
    t: params.get('t') as number | undefined
  }))
}
