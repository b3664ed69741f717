import { parseArgs } from 'node:util'
import { canonicalIp } from '../../keys/ip.js'
import { parseWindow } from '../../policy/duration.js'
import { CLI_DEFAULTS, MAX_CLI_TTL_MS, MAX_IPV6_SUBNET, MAX_TIMEOUT_MS, MIN_IPV6_SUBNET } from '../../limits.js'
import type { RateLimitIdentity } from '../../types/index.js'
import { CLIENTS, type ClientName, type Target } from './connect.js'
import { usage } from './exit.js'
import { COMMANDS, commandSpec, CONNECTION_OPTIONS, optionsOf, type CommandSpec, type OptionSpec } from './usage.js'

/*
 * The command line to a command, its operands and its checked options. Every
 * check fails with a one-line usage error (exit 2).
 */

export type Values = Record<string, string | boolean | string[] | undefined>

export interface Invocation {
  /** undefined: the tool's help. */
  spec: CommandSpec | undefined
  operands: string[]
  values: Values
  help: boolean
}

/** Every option any command takes, for one strict parse; which command takes which is checked after. */
function allOptions (): Record<string, { type: 'string' | 'boolean', multiple?: boolean, short?: string }> {
  const out: Record<string, { type: 'string' | 'boolean', multiple?: boolean, short?: string }> = {}
  const every: OptionSpec[] = [...CONNECTION_OPTIONS, ...COMMANDS.flatMap((command) => optionsOf(command))]
  for (const option of every) {
    out[option.name] = { type: option.value === undefined ? 'boolean' : 'string', ...(option.multiple === true ? { multiple: true } : {}) }
  }
  const help = out.help
  if (help !== undefined) help.short = 'h'
  return out
}

/** The words that name a command (`bans add`), then its operands. */
function commandOf (positionals: string[]): { spec: CommandSpec | undefined, operands: string[] } {
  const [first, second, ...rest] = positionals
  if (first === undefined) return { spec: undefined, operands: [] }
  if (first === 'help') {
    const wanted = [second, ...rest].filter((word) => word !== undefined).join(' ')
    if (wanted === '') return { spec: undefined, operands: [] }
    const spec = commandSpec(wanted)
    if (spec === undefined) throw usage(`unknown command ${JSON.stringify(wanted)}: run ${'fastify-redis-rate-limit'} --help for the list`)
    return { spec, operands: ['--help'] }
  }
  if (second !== undefined) {
    const spec = commandSpec(`${first} ${second}`)
    if (spec !== undefined) return { spec, operands: rest }
    if (second === 'list' && commandSpec(first) !== undefined) return { spec: commandSpec(first), operands: rest }
  }
  const spec = commandSpec(first)
  if (spec === undefined) throw usage(`unknown command ${JSON.stringify(first)}: run fastify-redis-rate-limit --help for the list`)
  return { spec, operands: second === undefined ? [] : [second, ...rest] }
}

export function parseInvocation (argv: readonly string[]): Invocation {
  let parsed: ReturnType<typeof parseArgs>
  try {
    parsed = parseArgs({ args: [...argv], options: allOptions(), allowPositionals: true, strict: true })
  } catch (error) {
    // Node's messages add a hint on a second sentence about '--': the first is the reason.
    throw usage(((error as Error).message.split('. ')[0] ?? 'bad arguments').replace(/\.$/, ''))
  }
  const values = parsed.values as Values
  const found = commandOf(parsed.positionals)
  const help = values.help === true || found.operands[0] === '--help'
  if (found.spec !== undefined && !help) {
    const allowed = new Set(optionsOf(found.spec).map((option) => option.name))
    for (const name of Object.keys(values)) {
      if (!allowed.has(name)) throw usage(`${found.spec.name} does not take --${name} (see ${found.spec.name} --help)`)
    }
  }
  return { spec: found.spec, operands: found.spec === undefined || help ? [] : found.operands, values, help }
}

export function text (values: Values, name: string): string | undefined {
  const value = values[name]
  return typeof value === 'string' ? value : undefined
}

export function required (values: Values, name: string, command: string): string {
  const value = text(values, name)
  if (value === undefined || value.trim() === '') throw usage(`${command} needs --${name}`)
  return value
}

/** An integer option from `min` to `max`. */
export function integer (values: Values, name: string, fallback: number | undefined, min: number, max: number): number | undefined {
  const value = text(values, name)
  if (value === undefined) return fallback
  const number = /^\d+$/.test(value) ? Number(value) : NaN
  if (!Number.isSafeInteger(number) || number < min || number > max) throw usage(`--${name} must be an integer from ${min} to ${max} (got ${JSON.stringify(value)})`)
  return number
}

/** A duration option (`2s`, `500ms`, or ms as digits) from `minMs` to `maxMs`. */
export function durationOption (values: Values, name: string, fallback: string, minMs: number, maxMs: number): number {
  const value = text(values, name) ?? fallback
  const ms = parseWindow(/^\d+$/.test(value) ? Number(value) : value, maxMs)
  if (typeof ms === 'string') throw usage(`--${name} ${ms}`)
  if (ms < minMs) throw usage(`--${name} must be at least ${minMs} ms (got ${JSON.stringify(value)})`)
  return ms
}

/** `--ttl`: a duration up to MAX_CLI_TTL_MS, or `permanent`. */
export function ttl (values: Values, command: string): number | 'permanent' {
  const value = required(values, 'ttl', command)
  if (value === 'permanent') return value
  return durationOption(values, 'ttl', value, 1000, MAX_CLI_TTL_MS)
}

function hostPorts (value: string, name: string): Array<{ host: string, port: number }> {
  return value.split(',').map((entry) => {
    const match = /^(\[[^\]]+\]|[^:]+):(\d{1,5})$/.exec(entry.trim())
    const port = Number(match?.[2])
    if (match === null || port < 1 || port > 65535) throw usage(`--${name} takes host:port[,host:port…] (got ${JSON.stringify(entry)})`)
    return { host: (match[1] as string).replace(/^\[|\]$/g, ''), port }
  })
}

export interface ConnectionOptions {
  target: Target
  prefix: string
  client: ClientName | undefined
  timeoutMs: number
}

/** Where to connect, from the options and REDIS_URL: exactly one of --redis (or REDIS_URL), --cluster, --sentinel. */
export function connectionOptions (values: Values, env: NodeJS.ProcessEnv): ConnectionOptions {
  const cluster = text(values, 'cluster')
  const sentinel = text(values, 'sentinel')
  const url = text(values, 'redis')
  const given = [url, cluster, sentinel].filter((value) => value !== undefined)
  if (given.length > 1) throw usage('give one of --redis, --cluster and --sentinel')
  let target: Target
  if (cluster !== undefined) target = { kind: 'cluster', nodes: hostPorts(cluster, 'cluster') }
  else if (sentinel !== undefined) {
    const name = text(values, 'name')
    if (name === undefined || name === '') throw usage('--sentinel needs --name <master>')
    target = { kind: 'sentinel', sentinels: hostPorts(sentinel, 'sentinel'), name }
  } else {
    const from = url ?? env.REDIS_URL
    if (from === undefined || from === '') throw usage('no Redis: give --redis URL (or set REDIS_URL), --cluster or --sentinel')
    if (!/^rediss?:\/\//.test(from)) throw usage(`--redis takes a redis:// or rediss:// URL (got ${JSON.stringify(from.slice(0, 64))})`)
    target = { kind: 'standalone', url: from }
  }
  if (text(values, 'name') !== undefined && target.kind !== 'sentinel') throw usage('--name goes with --sentinel')
  const prefix = text(values, 'prefix') ?? CLI_DEFAULTS.prefix
  const client = text(values, 'client')
  if (client !== undefined && !(CLIENTS as readonly string[]).includes(client)) throw usage(`--client must be one of ${CLIENTS.join(', ')} (got ${JSON.stringify(client)})`)
  return { target, prefix, client: client as ClientName | undefined, timeoutMs: durationOption(values, 'timeout', CLI_DEFAULTS.timeout, 1, MAX_TIMEOUT_MS) }
}

/** `name=value` pairs of a repeatable option. */
function pairs (values: Values, name: string): Record<string, string> | undefined {
  const list = values[name]
  if (!Array.isArray(list)) return undefined
  const out: Record<string, string> = {}
  for (const entry of list) {
    const at = entry.indexOf('=')
    if (at <= 0) throw usage(`--${name} takes NAME=VALUE (got ${JSON.stringify(entry.slice(0, 64))})`)
    out[entry.slice(0, at)] = entry.slice(at + 1)
  }
  return out
}

/** The caller the options name, checked: an IP address that is one, values that are not empty. */
export function identityOf (values: Values): RateLimitIdentity {
  const identity: RateLimitIdentity = {}
  const ip = text(values, 'ip')
  if (ip !== undefined) {
    if (canonicalIp(ip, MAX_IPV6_SUBNET) === undefined) throw usage(`--ip is not an IP address (got ${JSON.stringify(ip.slice(0, 64))})`)
    identity.ip = ip
  }
  for (const [option, field] of [['user', 'user'], ['api-key', 'apiKey'], ['tier', 'tier']] as const) {
    const value = text(values, option)
    if (value === undefined) continue
    if (value === '') throw usage(`--${option} must not be empty`)
    identity[field] = value
  }
  const headers = pairs(values, 'header')
  if (headers !== undefined) identity.headers = headers
  const params = pairs(values, 'param')
  if (params !== undefined) identity.params = params
  const body = pairs(values, 'body')
  if (body !== undefined) identity.body = body
  return identity
}

/** Whether the options name any caller at all (a tier alone names none). */
export function namesCaller (identity: RateLimitIdentity): boolean {
  return (['ip', 'user', 'apiKey', 'headers', 'params', 'body'] as const).some((field) => identity[field] !== undefined)
}

/** `--ipv6-subnet`, undefined for the plugin's default. */
export function ipv6Subnet (values: Values): number | undefined {
  return integer(values, 'ipv6-subnet', undefined, MIN_IPV6_SUBNET, MAX_IPV6_SUBNET)
}
