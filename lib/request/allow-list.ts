import type { FastifyRequest } from 'fastify'
import ipaddr from 'ipaddr.js'
import type { SkipPredicate } from '../types/index.js'
import { awaitWithin, isThenable, type Outcome } from '../util/await-within.js'
import { MAX_ALLOW_ENTRIES, SKIP_TIMEOUT_MS } from '../limits.js'

export type { SkipPredicate } from '../types/index.js'

/*
 * Requests that are not limited at all: the plugin's `allowList` (addresses
 * and CIDR ranges, or a predicate) and a block's `skip(request)`. Addresses
 * are read the way identities are (Fastify's request.ip, so trustProxy
 * decides; IPv4-mapped IPv6 is IPv4; zone ids dropped), but matched whole:
 * an IPv6 entry names one address, a range names a prefix. A predicate may be
 * sync or async; an async one is bounded by SKIP_TIMEOUT_MS, and whatever is
 * not a plain `true` in time (a throw, a rejection, another value, the
 * timeout) fails safe: the request is limited as usual.
 */

type Address = ipaddr.IPv4 | ipaddr.IPv6

/** One address as a caller is matched: IPv4-mapped IPv6 as IPv4, no zone id. */
function normalise (address: Address): Address {
  if (address.kind() === 'ipv6') {
    const v6 = address as ipaddr.IPv6
    v6.zoneId = undefined
    if (v6.isIPv4MappedAddress()) return v6.toIPv4Address()
  }
  return address
}

function parseAddress (text: string): Address | undefined {
  if (!ipaddr.isValid(text)) return undefined
  try {
    return normalise(ipaddr.parse(text))
  } catch {
    return undefined
  }
}

/** An entry as a range, or a string saying why it is not one. */
function parseEntry (entry: unknown): [Address, number] | string {
  if (typeof entry !== 'string') return `has an entry of type ${entry === null ? 'null' : typeof entry} (use 'address' or 'address/prefix' strings)`
  const slash = entry.indexOf('/')
  const address = parseAddress(slash === -1 ? entry : entry.slice(0, slash))
  const bits = slash === -1 ? undefined : Number(entry.slice(slash + 1))
  const shown = JSON.stringify(entry.slice(0, 64))
  if (address === undefined) return `has an entry ${shown} that is not an IP address or CIDR range`
  const max = address.kind() === 'ipv4' ? 32 : 128
  if (bits === undefined) return [address, max]
  // An IPv4-mapped range (::ffff:10.0.0.0/104) is the IPv4 range it maps.
  const mapped = address.kind() === 'ipv4' && entry.includes(':')
  const prefix = mapped ? bits - 96 : bits
  if (!/^\d{1,3}$/.test(entry.slice(slash + 1)) || !Number.isInteger(prefix) || prefix < 0 || prefix > max) return `has an entry ${shown} whose prefix length is not from 0 to ${mapped ? 128 : max}`
  return [address, prefix]
}

/**
 * Compiles an allowList array into a predicate on request.ip, or returns a
 * string saying what is wrong with it (the caller throws the coded error).
 */
export function compileAllowList (entries: readonly unknown[]): SkipPredicate | string {
  if (entries.length > MAX_ALLOW_ENTRIES) return `has ${entries.length} entries (at most ${MAX_ALLOW_ENTRIES})`
  const exact = new Set<string>()
  const ranges: Array<[Address, number]> = []
  for (const entry of entries) {
    const parsed = parseEntry(entry)
    if (typeof parsed === 'string') return parsed
    const [address, prefix] = parsed
    if (prefix === (address.kind() === 'ipv4' ? 32 : 128)) exact.add(address.toString())
    else ranges.push(parsed)
  }
  return function allowListed (request: FastifyRequest): boolean {
    const address = parseAddress(request.ip)
    if (address === undefined) return false
    if (exact.has(address.toString())) return true
    for (const range of ranges) {
      if (range[0].kind() === address.kind() && address.match(range as [never, number])) return true
    }
    return false
  }
}

/**
 * Calls a predicate: true or false at once when it answers synchronously,
 * else a promise bounded by SKIP_TIMEOUT_MS. `onFailure` hears about every
 * failure (then the answer is false: limited as usual).
 */
export function callPredicate (predicate: SkipPredicate, request: FastifyRequest, onFailure: (cause: string) => void): boolean | Promise<boolean> {
  let value: unknown
  try {
    value = predicate(request)
  } catch (error) {
    onFailure(error instanceof Error ? error.message : String(error))
    return false
  }
  if (typeof value === 'boolean') return value
  if (isThenable(value)) return awaitWithin(value, SKIP_TIMEOUT_MS, 'allowList or skip').then((outcome) => answerOf(outcome, onFailure))
  onFailure(`returned a value of type ${value === null ? 'null' : typeof value}`)
  return false
}

/** An async predicate's answer: only a boolean in time counts; anything else is a failure (false). */
function answerOf (outcome: Outcome, onFailure: (cause: string) => void): boolean {
  if (!outcome.ok) {
    onFailure(outcome.error instanceof Error ? outcome.error.message : String(outcome.error))
    return false
  }
  const value = outcome.value
  if (typeof value === 'boolean') return value
  onFailure(`resolved to a value of type ${value === null ? 'null' : typeof value}`)
  return false
}
