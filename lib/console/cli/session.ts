import { CLI_DEFAULTS } from '../../limits.js'
import { appPolicies } from '../../picture/fleet.js'
import type { FleetView, InstancePicture } from '../../types/index.js'
import { connect, oneLine, type Connection } from './connect.js'
import { connectionOptions, ipv6Subnet, text, type Values } from './args.js'
import { CliError, EXIT, usage } from './exit.js'
import { startReplica, type RebuiltRoute, type Replica, type ReplicaSettings } from './replica.js'

/*
 * One CLI run's connection and the plugin apps on it: a bare one (no
 * routes) for the picture and the records, and a replica of the newest
 * instance's routes for the commands that name a route or a caller. Both
 * are started on demand and closed at the end of the run.
 */

/** What a run writes: stdout, stderr (one line per message), the environment. */
export interface Io {
  out: (text: string) => void
  err: (text: string) => void
  env: NodeJS.ProcessEnv
  /** Whether stdout is a terminal (`watch` redraws it in place). */
  tty: boolean
  /** Ends `watch` early (Ctrl-C). */
  signal?: AbortSignal
}

/** The environment variable the app's hashSecret may be given in (no process list shows it). */
export const HASH_SECRET_ENV = 'RATE_LIMIT_HASH_SECRET'

/** The newest instance (the latest start): a rolling deploy's new limits. */
export function newest (view: FleetView): InstancePicture | undefined {
  return view.instances.reduce<InstancePicture | undefined>((best, picture) => best === undefined || picture.startedAt > best.startedAt ? picture : best, undefined)
}

/** An error the plugin's API threw, as the CLI reports it: bad input (a coded API error) exits 2, anything else is Redis (1). */
export function apiError (error: unknown): CliError {
  if (error instanceof CliError) return error
  const code = (error as { code?: string }).code
  const line = oneLine(error)
  if (code === 'FST_RRL_INVALID_API_CALL' || code === 'FST_RRL_UNKNOWN_POLICY' || code === 'FST_RRL_AMBIGUOUS_TARGET') return new CliError(line, EXIT.usage)
  return new CliError(`Redis: ${line}`, EXIT.failure)
}

export class Session {
  readonly values: Values
  readonly io: Io
  readonly prefix: string
  #connection: Connection | undefined
  #bare: Replica | undefined
  #replica: Replica | undefined
  #view: FleetView | undefined

  constructor (values: Values, io: Io) {
    this.values = values
    this.io = io
    this.prefix = text(values, 'prefix') ?? CLI_DEFAULTS.prefix
  }

  async #settings (): Promise<ReplicaSettings> {
    const options = connectionOptions(this.values, this.io.env)
    this.#connection ??= await connect(options.target, options.client, options.timeoutMs)
    const settings: ReplicaSettings = { client: this.#connection.client, prefix: options.prefix, timeoutMs: options.timeoutMs }
    const subnet = ipv6Subnet(this.values)
    if (subnet !== undefined) settings.ipv6Subnet = subnet
    return settings
  }

  /** The plugin on the user's client, without routes: the picture and the records. */
  async bare (): Promise<Replica> {
    this.#bare ??= await startReplica(await this.#settings())
    return this.#bare
  }

  /** The fleet's picture, read now (once per run unless `fresh`). */
  async fleet (fresh = false): Promise<FleetView> {
    if (this.#view === undefined || fresh) {
      const bare = await this.bare()
      try {
        this.#view = await bare.api.fleet()
      } catch (error) {
        throw apiError(error)
      }
    }
    return this.#view
  }

  /** The hashSecret to give the replica: the app's, required when its picture says it has one and `needed`. */
  #secret (picture: InstancePicture, needed: boolean): string | undefined {
    const given = text(this.values, 'hash-secret') ?? this.io.env[HASH_SECRET_ENV]
    if (!picture.hashSecret) {
      if (given !== undefined && given !== '') this.io.err(`warning: ignoring the hashSecret given: the app's picture says it hashes identities without one (${picture.id})`)
      return undefined
    }
    if ((given === undefined || given === '') && needed) {
      throw usage(`the app hashes identities with a hashSecret (its picture says so): give it in ${HASH_SECRET_ENV} (or --hash-secret) to name a caller`)
    }
    return given === '' ? undefined : given
  }

  /**
   * The plugin with the newest instance's routes and global blocks; `needsSecret`:
   * the command renders a caller's identity, so the app's hashSecret is required when it has one.
   */
  async replica (needsSecret: boolean): Promise<Replica> {
    if (this.#replica !== undefined) return this.#replica
    const view = await this.fleet()
    const picture = newest(view)
    if (picture === undefined) {
      throw new CliError(`no live instance publishes its picture under the prefix ${JSON.stringify(this.prefix)} (the plugin's picture option): the CLI rebuilds routes from the newest one`, EXIT.unhealthy)
    }
    const settings = await this.#settings()
    const secret = this.#secret(picture, needsSecret)
    if (secret !== undefined) settings.hashSecret = secret
    // The app's own grouping of IPv6 callers, as its picture says (an older picture without it: --ipv6-subnet, or the default).
    if (settings.ipv6Subnet === undefined && typeof picture.ipv6Subnet === 'number') settings.ipv6Subnet = picture.ipv6Subnet
    // Every registration of the newest process: each publishes its own routes.
    const policies = appPolicies(view.instances).find((process) => process.ids.includes(picture.id))?.policies ?? picture.policies
    this.#replica = await startReplica(settings, policies)
    return this.#replica
  }

  /** The rebuilt route `target` names (by a method's label or an own block's name); undefined for another target (a global block). */
  static routeOf (replica: Replica, target: string): RebuiltRoute | undefined {
    return replica.routes.find((route) => route.label === target || route.names.includes(target))
  }

  async close (): Promise<void> {
    for (const app of [this.#replica, this.#bare]) await app?.close().catch(() => {})
    await this.#connection?.close()
  }
}
