import type { FastifyRequest } from 'fastify'
import { FST_RRL_CONSOLE_NO_AUTHORIZE, FST_RRL_INVALID_OPTION } from '../../errors.js'
import { CONSOLE_DEFAULTS, MAX_AUDIT_READ, MAX_CONFIG_KEY_LENGTH, MAX_CONSOLE_REFRESH_MS, MIN_CONSOLE_REFRESH_MS } from '../../limits.js'
import { parseWindow } from '../../policy/duration.js'
import type { AnyRateLimitBlock } from '../../types/index.js'
import { isCount, shown } from '../../util/validate.js'

/* The console page's options (docs/console.md, "The console page"): checked once, at register. */

export interface ConsolePageOptions {
  /**
   * Decides who may use the console: `true` lets the request in, anything
   * else (false, a throw, a rejection) answers 403 and changes nothing.
   * Required unless `public: true`.
   */
  authorize?: (request: FastifyRequest) => boolean | Promise<boolean>
  /** Serve the console to anyone who reaches it (no `authorize`): logged as a warning at every start. Default false. */
  public?: boolean
  /** Who makes a change, for the log and the audit trail. Default: `request.ip`. */
  actor?: (request: FastifyRequest) => string | Promise<string>
  /** How often the page reads the fleet (ms or a duration string, 250 ms to 60 s). Default `'1s'`. */
  refresh?: number | string
  /** Audit entries the page shows (1–1000). Default 50. */
  audit?: number
  /** The limit of each console route (a block or an array of blocks, as `config.rateLimit` takes). Default `{ limit: 300, window: '1m' }`. */
  rateLimit?: AnyRateLimitBlock | AnyRateLimitBlock[]
  /** The rate limit plugin's `configKey`, when the app changed it. Default `'rateLimit'`. */
  configKey?: string
}

export interface ResolvedConsole {
  authorize: ((request: FastifyRequest) => boolean | Promise<boolean>) | undefined
  actor: (request: FastifyRequest) => string | Promise<string>
  refreshMs: number
  audit: number
  rateLimit: AnyRateLimitBlock | AnyRateLimitBlock[]
  configKey: string
}

const KNOWN = new Set(['authorize', 'public', 'actor', 'refresh', 'audit', 'rateLimit', 'configKey', 'prefix', 'logLevel', 'logSerializers'])

const invalid = (name: string, message: string): Error => new FST_RRL_INVALID_OPTION(`console ${name}`, message)

export function resolveConsole (input: ConsolePageOptions | undefined): ResolvedConsole {
  const options = (input ?? {}) as Record<string, unknown>
  for (const name of Object.keys(options)) {
    if (!KNOWN.has(name)) throw invalid(name, `is not an option of the console (${[...KNOWN].slice(0, 7).join(', ')})`)
  }
  const isPublic = options.public ?? CONSOLE_DEFAULTS.public
  if (typeof isPublic !== 'boolean') throw invalid('public', `must be true or false (got ${shown(isPublic)})`)
  const authorize = options.authorize
  if (authorize !== undefined && typeof authorize !== 'function') throw invalid('authorize', `must be a function (request) => boolean | Promise<boolean> (got ${shown(authorize)})`)
  if (authorize === undefined && !isPublic) throw new FST_RRL_CONSOLE_NO_AUTHORIZE()
  const actor = options.actor ?? ((request: FastifyRequest) => request.ip)
  if (typeof actor !== 'function') throw invalid('actor', `must be a function (request) => string (got ${shown(actor)})`)
  const refreshMs = parseWindow(options.refresh ?? CONSOLE_DEFAULTS.refresh)
  if (typeof refreshMs === 'string' || refreshMs < MIN_CONSOLE_REFRESH_MS || refreshMs > MAX_CONSOLE_REFRESH_MS) {
    throw invalid('refresh', `must be from ${MIN_CONSOLE_REFRESH_MS} ms to ${MAX_CONSOLE_REFRESH_MS} ms (got ${shown(options.refresh)})`)
  }
  const audit = options.audit ?? CONSOLE_DEFAULTS.audit
  if (!isCount(audit, MAX_AUDIT_READ) || audit < 1) throw invalid('audit', `must be an integer from 1 to ${MAX_AUDIT_READ} (got ${shown(audit)})`)
  const rateLimit = options.rateLimit ?? CONSOLE_DEFAULTS.rateLimit
  // The block itself is checked by the rate limit plugin when the routes are added; false is refused here.
  if (rateLimit === null || typeof rateLimit !== 'object') throw invalid('rateLimit', `must be a rate limit block or an array of blocks: the console's routes are always limited (got ${shown(rateLimit)})`)
  const configKey = options.configKey ?? CONSOLE_DEFAULTS.configKey
  if (typeof configKey !== 'string' || configKey === '' || configKey.length > MAX_CONFIG_KEY_LENGTH) throw invalid('configKey', `must be the rate limit plugin's configKey (got ${shown(configKey)})`)
  return {
    authorize: authorize as ResolvedConsole['authorize'],
    actor: actor as ResolvedConsole['actor'],
    refreshMs,
    audit,
    rateLimit: rateLimit as ResolvedConsole['rateLimit'],
    configKey
  }
}
