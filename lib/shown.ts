/**
 * A configuration value as an error message shows it after "got": strings
 * quoted, so `limit: '10'` reads `(got "10")`, never like the valid number 10.
 */
export function shown (value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(value)
  if (typeof value === 'function') return 'a function'
  if (typeof value === 'object' && value !== null) return Array.isArray(value) ? 'an array' : 'an object'
  return String(value)
}
