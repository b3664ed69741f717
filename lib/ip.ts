import { isIPv4, isIPv6 } from 'node:net'
import ipaddr from 'ipaddr.js'

/*
 * One caller, one spelling: IPv4-mapped IPv6 becomes IPv4, IPv6 is written in
 * RFC 5952 form and grouped by prefix (a subscriber usually holds a whole /64,
 * so per-address limits on IPv6 are trivially bypassed), NAT64 addresses keep
 * their embedded IPv4 apart, and anything that is not an IP is refused.
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
  if (address.isIPv4MappedAddress()) return address.toIPv4Address().toString()
  if (address.match(NAT64)) return address.toRFC5952String()
  if (ipv6Subnet >= 128) return address.toRFC5952String()
  const network = ipaddr.IPv6.networkAddressFromCIDR(`${address.toString()}/${ipv6Subnet}`)
  return `${network.toRFC5952String()}/${ipv6Subnet}`
}
