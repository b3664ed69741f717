import { item } from '../util/item.js'
/*
 * The names a plugin option and a block field may have, and the message for
 * one that is neither: "did you mean …?" for a near miss of a known name, a
 * name of the other place (a block field given as a plugin option, or the
 * reverse), or a name @fastify/rate-limit or express-rate-limit use, with its
 * counterpart here and, where the meaning differs, how.
 */

/** Every plugin option (docs/options.md documents each; test/docs/readme.test.ts checks). */
export const OPTION_NAMES: ReadonlySet<string> = new Set([
  'redis', 'store', 'prefix', 'defaultLimit', 'onRedisError', 'timeout', 'headers', 'user', 'apiKey', 'ipv6Subnet', 'clock',
  'hashSecret', 'globalLimits', 'denyCache', 'mode', 'tier', 'policies', 'printPolicies', 'metrics', 'batchWrites', 'maxBatch', 'maxInFlight',
  'maxPending', 'maxDelayed', 'fleetSize', 'maxKeys', 'circuitBreaker', 'configKey', 'hook', 'identityTimeout', 'allowList', 'replyBuilder',
  'useErrorHandler', 'notFound', 'lease', 'picture'
])

/** The fields a block may have (docs/options.md documents each; test/docs/readme.test.ts checks). */
export const BLOCK_FIELDS: ReadonlySet<string> = new Set([
  'limit', 'window', 'algorithm', 'burst', 'by', 'cost', 'onRedisError', 'name', 'mode',
  'refundOn', 'penalty', 'localLimit', 'hook', 'requestLimit', 'skip', 'settle', 'period', 'timeZone', 'weekStart', 'concurrency',
  'delay', 'wait'
])

/** Where a name was given: the plugin options, or a block (a route's, defaultLimit, globalLimits, policies, notFound). */
export type NamePlace = 'option' | 'block'

/** What to write instead (a code phrase), and how its meaning differs. */
interface Hint { use: string, note?: string }

function hint (use: string, note?: string): Hint {
  return note === undefined ? { use } : { use, note }
}

const FRL = '@fastify/rate-limit'
const ERL = 'express-rate-limit'
const NOTES = {
  windowMs: `${ERL}'s \`windowMs\` is milliseconds; \`window\` takes milliseconds or a string like '15m'.`,
  by: 'It takes \'ip\', \'user\', \'api-key\', \'header:<name>\', \'param:<name>\', \'body:<field>\', (request) => string, or an array of them.',
  failed: 'E.g. `refundOn: (reply) => reply.statusCode >= 400` gives failed requests back.',
  succeeded: 'E.g. `refundOn: (reply) => reply.statusCode < 400` gives successful requests back.',
  penalty: '`penalty: { after, for, backoff }` refuses repeat offenders outright, longer at each offence.',
  onRedisError: '\'open\' (the default) admits while Redis fails, \'closed\' answers 503, \'local\' limits per instance.',
  channel: 'It publishes every decision with its outcome.',
  status: 'Refusals are 429, 503 or 403; send another status from setErrorHandler.',
  headers: 'It names the header formats to send: \'ietf\' (the default), \'draft-6\' or \'draft-7\' (as express-rate-limit\'s standardHeaders), \'legacy\' (X-RateLimit-*), an array of them, or false (docs/replies.md#header-formats); there are no per-header switches.'
}
const CHANNEL = hint('the `fastify-redis-rate-limit:decision` diagnostics channel', NOTES.channel)
const REPLY = hint('the plugin option `replyBuilder` (or `useErrorHandler`)')

/**
 * Names written for a block field: the peers' (their route options, and
 * express-rate-limit's limiter options), and plugin options whose per-block
 * counterpart has another name.
 */
const PEER_FIELDS: Record<string, Hint> = {
  user: hint('`by: \'user\'`', 'The plugin option `user` says who the user is; a block\'s `by` picks it.'),
  apiKey: hint('`by: \'api-key\'`', 'The plugin option `apiKey` reads the key; a block\'s `by` picks it.'),
  tier: hint('a tier map in `limit`, like `{ default: 60, pro: 600 }`', 'The plugin option `tier` says which tier a request is.'),
  max: hint('`limit`', `\`max\` is ${FRL}'s name (and older ${ERL}'s); a \`max\` function is \`requestLimit\` here.`),
  timeWindow: hint('`window`', `${FRL}'s \`timeWindow\`: the same strings, like '1 minute', or milliseconds.`),
  windowMs: hint('`window`', NOTES.windowMs),
  keyGenerator: hint('`by`', NOTES.by),
  allowList: hint('`skip`', 'Per block, `skip: (request) => boolean`; addresses and CIDR ranges go in the plugin option `allowList`.'),
  identifier: hint('`name`', 'The policy name shown in RateLimit-Policy.'),
  skipOnError: hint('`onRedisError`', NOTES.onRedisError),
  passOnStoreError: hint('`onRedisError`', NOTES.onRedisError),
  skipFailedRequests: hint('`refundOn`', NOTES.failed),
  skipSuccessfulRequests: hint('`refundOn`', NOTES.succeeded),
  requestWasSuccessful: hint('`refundOn`', 'It returns true for the replies whose units are given back.'),
  continueExceeding: hint('`penalty`', NOTES.penalty),
  exponentialBackoff: hint('`penalty`', NOTES.penalty),
  ban: hint('`penalty` (or `fastify.rateLimit.ban()`)', NOTES.penalty),
  groupId: hint('the plugin option `globalLimits`, or a named policy in `policies`', 'Blocks are keyed by route, never shared by a name.'),
  errorResponseBuilder: REPLY,
  handler: REPLY,
  onExceeding: CHANNEL,
  onExceeded: CHANNEL,
  message: REPLY,
  statusCode: hint('the plugin option `useErrorHandler: true`', NOTES.status),
  onBanReach: hint('`penalty` (or `fastify.rateLimit.ban()`)', NOTES.penalty),
  enableDraftSpec: hint('the plugin option `headers`', NOTES.headers),
  standardHeaders: hint('the plugin option `headers`', NOTES.headers),
  legacyHeaders: hint('the plugin option `headers`', NOTES.headers),
  addHeaders: hint('the plugin option `headers`', NOTES.headers),
  addHeadersOnExceeding: hint('the plugin option `headers`', NOTES.headers)
}

/** Names written for a plugin option: the peers' plugin-level names. */
const PEER_OPTIONS: Record<string, Hint> = {
  max: hint('`defaultLimit: { limit, window }`', `${FRL}'s \`max\` is a block's \`limit\` here; a route declares its own in config.rateLimit.`),
  timeWindow: hint('`defaultLimit: { limit, window }`', `${FRL}'s \`timeWindow\` is a block's \`window\` here.`),
  windowMs: hint('`defaultLimit: { limit, window }`', NOTES.windowMs),
  global: hint('`defaultLimit`', 'A block for the routes that declare none; without one, every route must declare (strict mode).'),
  keyGenerator: hint('the options `user` and `apiKey`, or a block\'s `by`', NOTES.by),
  nameSpace: hint('`prefix`', 'The first segment of every key.'),
  cache: hint('`denyCache: { max }`', 'It bounds the local cache of refused callers; `maxKeys` bounds the memory store.'),
  skip: hint('`allowList`', 'Addresses and CIDR ranges, or a function (request) => boolean; per route, a block\'s `skip`.'),
  skipOnError: hint('`onRedisError`', NOTES.onRedisError),
  passOnStoreError: hint('`onRedisError`', NOTES.onRedisError),
  statusCode: hint('`useErrorHandler: true`', NOTES.status),
  message: hint('`replyBuilder` (or `useErrorHandler`)'),
  handler: hint('`replyBuilder` (or `useErrorHandler`)'),
  errorResponseBuilder: hint('`replyBuilder` (or `useErrorHandler`)', 'It returns { body, headers? }.'),
  enableDraftSpec: hint('`headers`', NOTES.headers),
  standardHeaders: hint('`headers`', NOTES.headers),
  legacyHeaders: hint('`headers`', NOTES.headers),
  addHeaders: hint('`headers`', NOTES.headers),
  addHeadersOnExceeding: hint('`headers`', NOTES.headers),
  identifier: hint('a block\'s `name`'),
  skipFailedRequests: hint('a block\'s `refundOn`', NOTES.failed),
  skipSuccessfulRequests: hint('a block\'s `refundOn`', NOTES.succeeded),
  requestWasSuccessful: hint('a block\'s `refundOn`', PEER_FIELDS.requestWasSuccessful?.note),
  continueExceeding: hint('a block\'s `penalty`', NOTES.penalty),
  exponentialBackoff: hint('a block\'s `penalty`', NOTES.penalty),
  ban: hint('a block\'s `penalty` (or `fastify.rateLimit.ban()`)', NOTES.penalty),
  onBanReach: hint('a block\'s `penalty` (or `fastify.rateLimit.ban()`)', NOTES.penalty),
  groupId: hint('`globalLimits`, or a named policy in `policies`'),
  onExceeding: CHANNEL,
  onExceeded: CHANNEL
}

/** The names each place has a hint table entry for (docs/errors.md lists them; test/docs/readme.test.ts checks). */
export const HINTED_NAMES: Readonly<Record<NamePlace, readonly string[]>> = { option: Object.keys(PEER_OPTIONS), block: Object.keys(PEER_FIELDS) }

const PLACES = {
  option: { names: OPTION_NAMES, peers: PEER_OPTIONS, other: BLOCK_FIELDS, what: 'is not an option' },
  block: { names: BLOCK_FIELDS, peers: PEER_FIELDS, other: OPTION_NAMES, what: 'is not a rate limit field' }
} as const

/** A name of the other place, given here. */
function misplaced (name: string, place: NamePlace): Hint {
  return place === 'option'
    ? hint(`a block's \`${name}\``, 'Blocks are defaultLimit, globalLimits, policies, notFound and a route\'s config.rateLimit.')
    : hint(`the plugin option \`${name}\``, 'It is set once at register, not per block.')
}

/** Optimal string alignment distance: insertions, deletions, substitutions and swaps of neighbours, one each. */
function editDistance (a: string, b: string): number {
  let before: number[] = []
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j)
  for (let i = 1; i <= a.length; i++) {
    const row = [i]
    for (let j = 1; j <= b.length; j++) {
      const same = a[i - 1] === b[j - 1] ? 0 : 1
      let best = Math.min(item(previous, j) + 1, item(row, j - 1) + 1, item(previous, j - 1) + same)
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) best = Math.min(best, item(before, j - 2) + 1)
      row.push(best)
    }
    before = previous
    previous = row
  }
  return item(previous, b.length)
}

/** The hint for an unknown name: a peer's or the other place's name as given, else the nearest name of either (case aside). */
function hintFor (name: string, place: NamePlace): Hint | undefined {
  const { names, peers, other } = PLACES[place]
  const exact = Object.hasOwn(peers, name) ? peers[name] : undefined
  if (exact !== undefined) return exact
  if (other.has(name)) return misplaced(name, place)
  const candidates: Array<[string, Hint]> = [
    ...[...names].map((known): [string, Hint] => [known, hint(`\`${known}\``)]),
    ...Object.entries(peers),
    ...[...other].map((known): [string, Hint] => [known, misplaced(known, place)])
  ]
  // A typo of a short name is one edit; longer names allow two. The first nearest wins: own names first.
  let best: [number, Hint] | undefined
  for (const [known, found] of candidates) {
    const distance = editDistance(name.toLowerCase(), known.toLowerCase())
    if (distance <= (name.length <= 5 ? 1 : 2) && (best === undefined || distance < best[0])) best = [distance, found]
  }
  return best?.[1]
}

/** The message for a name that is no option (or no block field): what it is not, a hint when one fits, and the known names. */
export function unknownNameMessage (name: string, place: NamePlace): string {
  const { names, what } = PLACES[place]
  const found = hintFor(name, place)
  const suggestion = found === undefined ? '' : `; did you mean ${found.use}?${found.note === undefined ? '' : ` ${found.note}`}`
  return `${what}${suggestion} (known: ${[...names].join(', ')})`
}
