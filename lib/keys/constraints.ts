/*
 * A route is its method, its URL and its constraints (Fastify's
 * `routeOptions.constraints`: host, version, custom strategies): two routes
 * on `GET /api` for two hosts are two routes, with their own keys, ban
 * scopes, API targets and policies() rows. The constraints enter those
 * through one stable text: keys sorted, strings and numbers as JSON, a RegExp
 * by its source and flags (`/^a\./i`, unquoted, so no string value reads as
 * one). A route without constraints has the empty text, and names, keys and
 * ids exactly as before constraints counted.
 */

function stableValue (value: unknown): string {
  if (value instanceof RegExp) return value.toString()
  if (Array.isArray(value)) return `[${value.map(stableValue).join(',')}]`
  if (value !== null && typeof value === 'object') {
    const entries = Object.entries(value).filter(([, item]) => item !== undefined).sort(([a], [b]) => a < b ? -1 : a > b ? 1 : 0)
    return `{${entries.map(([name, item]) => `${JSON.stringify(name)}:${stableValue(item)}`).join(',')}}`
  }
  if (typeof value === 'bigint') return `${value}n`
  return JSON.stringify(value) ?? String(value)
}

/** The stable text of a route's constraints (`{"host":"a.example.com"}`); '' when it has none. */
export function constraintText (constraints: unknown): string {
  if (constraints === null || typeof constraints !== 'object') return ''
  const text = stableValue(constraints)
  return text === '{}' ? '' : text
}

/** `GET /api`, or `GET /api {"host":"a.example.com"}` for a constrained route: logs, errors, ban scopes, API targets. */
export function routeLabel (method: string, url: string, constraints: string): string {
  return constraints === '' ? `${method} ${url}` : `${method} ${url} ${constraints}`
}
