import { isIPv4, isIPv6 } from 'node:net'
import ipaddr from 'ipaddr.js'
import { FST_RRL_INVALID_OPTION } from '../errors.js'
import { DEFAULTS, MAX_IPV6_SUBNET, MIN_IPV6_SUBNET } from '../limits.js'

/*
 * One caller, one spelling: IPv4-mapped IPv6 becomes IPv4, IPv6 is written in
 * RFC 5952 form and grouped by prefix (a subscriber usually holds a whole /64,
 * so per-address limits on IPv6 are trivially bypassed), NAT64 addresses keep
 * their embedded IPv4 apart, zone ids are dropped, and anything that is not an
 * IP is refused.
 */

const NAT64 = ipaddr.parseCIDR('64:ff9b::/96')

/** Canonical form of `raw`, or undefined when it is not an IP address. */
export function canonicalIp (raw: string | undefined, ipv6Subnet: number): string | undefined {
  if (raw === undefined) return undefined
  // Node's isIPv4 accepts only the dotted-quad form, which is already canonical.
  if (isIPv4(raw)) return raw
  if (!isIPv6(raw)) return undefined
  let address: ipaddr.IPv6
  try {
    address = ipaddr.IPv6.parse(raw)
  } catch {
    return undefined
  }
  // A zone id (`fe80::1%eth0`) names an interface of the receiving host, not a caller:
  // kept, it would let one address mint a bucket per made-up zone.
  address.zoneId = undefined
  if (address.isIPv4MappedAddress()) return address.toIPv4Address().toString()
  if (address.match(NAT64)) return address.toRFC5952String()
  if (ipv6Subnet >= 128) return address.toRFC5952String()
  const network = ipaddr.IPv6.networkAddressFromCIDR(`${address.toString()}/${ipv6Subnet}`)
  return `${network.toRFC5952String()}/${ipv6Subnet}`
}

/**
 * The public form (exported as `canonicalIp`): the same canonical address the
 * 'ip' identity part keys on, for `by` functions that build their own keys.
 * `ipv6Subnet` as the plugin option (default 64, 8–128); undefined for non-IPs.
 */
export function canonicalClientIp (raw: string | undefined, ipv6Subnet: number = DEFAULTS.ipv6Subnet): string | undefined {
  if (typeof ipv6Subnet !== 'number' || !Number.isInteger(ipv6Subnet) || ipv6Subnet < MIN_IPV6_SUBNET || ipv6Subnet > MAX_IPV6_SUBNET) {
    throw new FST_RRL_INVALID_OPTION('ipv6Subnet', `(canonicalIp's second argument) must be an integer prefix length from ${MIN_IPV6_SUBNET} to ${MAX_IPV6_SUBNET} (got ${String(ipv6Subnet)})`)
  }
  return typeof raw === 'string' ? canonicalIp(raw, ipv6Subnet) : undefined
}

/** The ranges proxies and load balancers usually connect from. */
const LOCAL_RANGES = new Set(['loopback', 'private', 'linkLocal', 'uniqueLocal', 'carrierGradeNat'])

/**
 * How a proxy-trust check reads a peer: 'local' for loopback, private,
 * link-local, unique-local and carrier-grade NAT addresses (where proxies
 * usually connect from), 'public' for every other address, undefined for a
 * non-IP. IPv4-mapped IPv6 is read as IPv4.
 */
export function peerKind (raw: string | undefined): 'local' | 'public' | undefined {
  if (raw === undefined || !ipaddr.isValid(raw)) return undefined
  return LOCAL_RANGES.has(ipaddr.process(raw).range()) ? 'local' : 'public'
}
