import { CLI_DEFAULTS, MAX_CLI_TTL_MS, MIN_WATCH_INTERVAL_MS } from '../../limits.js'
import { EXIT } from './exit.js'

/*
 * What the CLI takes: its commands, their options, and the help text each
 * prints. docs/cli.md is generated from this help (scripts/docs/cli-reference.ts,
 * `npm run docs:cli`), and test/console/cli-docs.test.ts fails when it is stale.
 */

export const TOOL = 'fastify-redis-rate-limit'

export interface OptionSpec {
  name: string
  /** The value's placeholder; a flag without one takes no value. */
  value?: string
  /** May be given more than once. */
  multiple?: boolean
  help: string
}

export interface CommandSpec {
  /** `status`, `bans add`, … */
  name: string
  summary: string
  /** What follows the command's name on its usage line. */
  args?: string
  /** Paragraphs after the usage line. */
  about: string[]
  options: readonly OptionSpec[]
  /** Whether it takes the caller options (--ip, --user, …). */
  identity?: 'required' | 'optional' | 'ban'
  /** Whether it changes the fleet's records (--actor and --reason required). */
  change?: boolean
  /** Whether it takes --json. */
  json?: boolean
}

const seconds = (ms: number): string => `${ms / 1000} s`

export const CONNECTION_OPTIONS: readonly OptionSpec[] = [
  { name: 'redis', value: 'URL', help: 'Redis to read, e.g. redis://:password@10.0.0.5:6379/0 (default: the REDIS_URL environment variable)' },
  { name: 'cluster', value: 'HOST:PORT[,…]', help: 'a Redis Cluster: one or more of its nodes' },
  { name: 'sentinel', value: 'HOST:PORT[,…]', help: 'Sentinels to ask for the master named by --name' },
  { name: 'name', value: 'MASTER', help: 'the master\'s name, with --sentinel' },
  { name: 'prefix', value: 'PREFIX', help: `the plugin's key prefix (default ${CLI_DEFAULTS.prefix}, as the plugin's)` },
  { name: 'client', value: 'NAME', help: 'the client package to drive: ioredis, iovalkey or redis (default: the first of them installed)' },
  { name: 'timeout', value: 'DURATION', help: `how long one Redis call may take (default ${CLI_DEFAULTS.timeout})` },
  { name: 'help', help: 'this help' }
]

export const JSON_OPTION: OptionSpec = { name: 'json', help: 'print JSON (the plugin API\'s objects) instead of tables' }

export const IDENTITY_OPTIONS: readonly OptionSpec[] = [
  { name: 'ip', value: 'ADDRESS', help: 'the caller\'s IP address' },
  { name: 'user', value: 'USER', help: 'what the app\'s user(request) returns for the caller' },
  { name: 'api-key', value: 'KEY', help: 'what the app\'s apiKey(request) returns for the caller' },
  { name: 'header', value: 'NAME=VALUE', multiple: true, help: 'a header a `header:<name>` part reads' },
  { name: 'param', value: 'NAME=VALUE', multiple: true, help: 'a route parameter a `param:<name>` part reads' },
  { name: 'body', value: 'FIELD=VALUE', multiple: true, help: 'a body field a `body:<field>` part reads' },
  { name: 'tier', value: 'TIER', help: 'the caller\'s tier, for blocks with tier maps (default: default)' },
  { name: 'hash-secret', value: 'SECRET', help: 'the app\'s hashSecret, when its picture says it has one (better: the RATE_LIMIT_HASH_SECRET environment variable, which no process list shows)' },
  { name: 'ipv6-subnet', value: 'BITS', help: 'the app\'s ipv6Subnet (default: what the newest instance\'s picture says)' }
]

export const BAN_IDENTITY_OPTIONS: readonly OptionSpec[] = [
  ...IDENTITY_OPTIONS.filter((option) => ['ip', 'user', 'api-key'].includes(option.name)),
  { name: 'key-hash', value: 'HASH', help: 'a caller as `top` shows it: the hash of its key\'s identity part (bans exactly the requests whose key on the route has it)' },
  ...IDENTITY_OPTIONS.filter((option) => ['hash-secret', 'ipv6-subnet'].includes(option.name))
]

export const CHANGE_OPTIONS: readonly OptionSpec[] = [
  { name: 'actor', value: 'WHO', help: 'who makes the change (logged and kept in the audit trail)' },
  { name: 'reason', value: 'WHY', help: 'why (logged and kept in the audit trail)' }
]

const TTL: OptionSpec = { name: 'ttl', value: 'DURATION', help: `how long it holds: 30m, 1h, 7d (at most ${MAX_CLI_TTL_MS / 86_400_000} days), or permanent` }

export const COMMANDS: readonly CommandSpec[] = [
  {
    name: 'status',
    summary: 'the fleet: instances, health and breakers per node, decisions per second per route',
    about: [
      'Reads every live instance\'s picture (one call) and shows each instance (version, uptime, store), each node\'s breaker as each instance sees it, and per route and policy the decisions per second over the last minute, summed over the fleet. Warns about pictures it cannot read (another format: a deploy in progress) and routes whose declared limits differ between instances.',
      `Exits ${EXIT.unhealthy} when no instance publishes a picture under the prefix, or when a breaker is open or probing.`
    ],
    options: [],
    json: true
  },
  {
    name: 'watch',
    summary: 'status, redrawn in the terminal until interrupted',
    about: ['Redraws `status` every interval (the pictures change once per instance interval). Ctrl-C ends it. Its exit code is the last status\'s.'],
    options: [
      { name: 'interval', value: 'DURATION', help: `between two reads (default ${CLI_DEFAULTS.interval}, at least ${seconds(MIN_WATCH_INTERVAL_MS)})` },
      { name: 'count', value: 'N', help: 'stop after N reads (default: until interrupted)' }
    ],
    json: true
  },
  {
    name: 'top',
    args: '[ROUTE]',
    summary: 'the callers refused most, per route, merged over the fleet',
    about: ['Each caller is named by the hash of its key\'s identity part (what a ban by key hash names), with the identity itself only where the app sets picture.rawIdentities. A count overestimates by at most its error (a Space-Saving summary per instance).'],
    options: [{ name: 'limit', value: 'N', help: `callers per route (default ${CLI_DEFAULTS.top})` }],
    json: true
  },
  {
    name: 'policies',
    summary: 'every instance\'s declared limits, and where instances disagree',
    about: ['The newest instance\'s limits per route and block; a route whose limits differ between instances (a deploy in progress, or instances configured apart) is listed with each variant and its instances. A block the CLI cannot reconstruct exactly (a function-valued `by` part, constraints that do not survive JSON) is marked custom: `peek` and `reset` refuse it.'],
    options: [],
    json: true
  },
  {
    name: 'bans',
    args: '[list]',
    summary: 'the bans in force',
    about: ['Every ban in force, as every instance applies it (read from Redis now).'],
    options: [],
    json: true
  },
  {
    name: 'bans add',
    summary: 'ban a caller fleet-wide, on every route or one',
    about: ['Exactly one of --ip, --user, --api-key, --key-hash names the caller. Every instance applies the ban within its next poll (1 s).'],
    options: [
      TTL,
      { name: 'route', value: 'ROUTE', help: 'only this route (e.g. "GET /orders/:id"); default every limited route' },
      { name: 'status', value: '403|429', help: 'the refusal\'s status (default 403; 429 sends Retry-After, not with a permanent ban)' }
    ],
    identity: 'ban',
    change: true,
    json: true
  },
  {
    name: 'bans remove',
    args: 'ID',
    summary: 'lift a ban by its id',
    about: [`The id as \`bans\` lists it (\`*|ip=203.0.113.7\`). Exits ${EXIT.failure} when no ban has that id.`],
    options: [],
    change: true,
    json: true
  },
  {
    name: 'overrides',
    args: '[list]',
    summary: 'the runtime overrides in force',
    about: ['Every override of a block\'s limit in force (read from Redis now).'],
    options: [],
    json: true
  },
  {
    name: 'overrides set',
    args: 'TARGET',
    summary: 'override a block\'s limit fleet-wide, for every caller or one',
    about: ['TARGET is a route with one block of its own ("GET /search") or a block\'s name. With caller options the override is that caller\'s alone.'],
    options: [{ name: 'limit', value: 'N', help: 'the limit to apply instead of the block\'s' }, TTL],
    identity: 'optional',
    change: true,
    json: true
  },
  {
    name: 'overrides clear',
    args: 'ID',
    summary: 'remove an override by its id',
    about: [`The id as \`overrides\` lists it. Exits ${EXIT.failure} when no override has that id.`],
    options: [],
    change: true,
    json: true
  },
  {
    name: 'peek',
    args: 'ROUTE',
    summary: 'what a caller\'s next request on a route would get, charging nothing',
    about: ['ROUTE as `policies` lists it ("GET /orders/:id"), or a block\'s name. Needs the app\'s hashSecret when its picture says it has one.'],
    options: [{ name: 'cost', value: 'N', help: 'the units the request would spend (default 1)' }],
    identity: 'required',
    json: true
  },
  {
    name: 'reset',
    args: 'ROUTE',
    summary: 'delete a caller\'s usage of a route\'s blocks (audited)',
    about: ['Deletes the caller\'s state for every block of the route (its global blocks stay: name a global block to reset it). Bans stay. An instance that refused the caller just before may answer from its local deny cache until that refusal\'s hold ends. Written to the audit trail. Needs the app\'s hashSecret when its picture says it has one.'],
    options: [],
    identity: 'required',
    change: true,
    json: true
  },
  {
    name: 'audit',
    summary: 'the newest operator changes: bans, overrides, audited resets',
    about: ['Newest first, from the audit trail Redis keeps (about the newest 10,000).'],
    options: [{ name: 'count', value: 'N', help: `entries (default ${CLI_DEFAULTS.audit}, at most 1000)` }],
    json: true
  }
]

export function commandSpec (name: string): CommandSpec | undefined {
  return COMMANDS.find((command) => command.name === name)
}

/** Every option a command takes, connection options included. */
export function optionsOf (spec: CommandSpec): OptionSpec[] {
  const identity = spec.identity === 'ban' ? BAN_IDENTITY_OPTIONS : spec.identity !== undefined ? IDENTITY_OPTIONS : []
  return [...spec.options, ...identity, ...(spec.change === true ? CHANGE_OPTIONS : []), ...(spec.json === true ? [JSON_OPTION] : []), ...CONNECTION_OPTIONS]
}

function optionLines (options: readonly OptionSpec[]): string[] {
  const heads = options.map((option) => `  --${option.name}${option.value === undefined ? '' : ' ' + option.value}`)
  const width = Math.max(...heads.map((head) => head.length)) + 2
  return options.map((option, i) => (heads[i] as string).padEnd(width) + option.help + (option.multiple === true ? ' (repeatable)' : ''))
}

/** The tool's help: its commands, the connection options, the exit codes. */
export function toolHelp (): string {
  const width = Math.max(...COMMANDS.map((command) => command.name.length)) + 2
  return [
    `Usage: ${TOOL} <command> [options]`,
    '',
    'The operator\'s console of fastify-redis-rate-limit: reads the picture every instance publishes to Redis, and changes bans, overrides and usage through the plugin\'s own code.',
    '',
    'Commands:',
    ...COMMANDS.map((command) => `  ${command.name.padEnd(width)}${command.summary}`),
    '',
    'Connection (every command):',
    ...optionLines(CONNECTION_OPTIONS),
    '',
    'Exit codes:',
    `  ${EXIT.ok}  done (status, watch: the fleet is healthy)`,
    `  ${EXIT.failure}  Redis failed or is unreachable, no Redis client is installed, or a change was refused`,
    `  ${EXIT.usage}  usage or bad input: unknown command, option or route, malformed identity, ttl out of range, missing hashSecret`,
    `  ${EXIT.unhealthy}  the fleet is not healthy: no live instance, or a breaker open or probing (status, watch; peek, reset and route changes when no instance publishes its limits)`,
    '',
    `${TOOL} <command> --help shows a command's options.`
  ].join('\n')
}

/** One command's help. */
export function commandHelp (spec: CommandSpec): string {
  const lines = [`Usage: ${TOOL} ${spec.name}${spec.args === undefined ? '' : ' ' + spec.args} [options]`, '', spec.summary.charAt(0).toUpperCase() + spec.summary.slice(1) + '.', '']
  for (const paragraph of spec.about) lines.push(paragraph, '')
  if (spec.options.length > 0) lines.push('Options:', ...optionLines(spec.options), '')
  if (spec.identity !== undefined) {
    const which = spec.identity === 'ban' ? BAN_IDENTITY_OPTIONS : IDENTITY_OPTIONS
    lines.push(spec.identity === 'ban' ? 'The caller (exactly one of --ip, --user, --api-key, --key-hash):' : `The caller (${spec.identity === 'required' ? 'required' : 'optional'}; the values the route's \`by\` parts read):`, ...optionLines(which), '')
  }
  if (spec.change === true) lines.push('The change (both required):', ...optionLines(CHANGE_OPTIONS), '')
  lines.push('Output and connection:', ...optionLines([...(spec.json === true ? [JSON_OPTION] : []), ...CONNECTION_OPTIONS]))
  return lines.join('\n')
}
