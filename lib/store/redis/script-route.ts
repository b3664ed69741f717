import type { FunctionLibrary } from './library.js'
import type { LoadedScript } from './scripts.js'
import { isLibraryLoaded, isTransientRefusal, type ClientPort, type MasterPort } from './client/port.js'
import type { StartupLog } from '../port.js'
import { awaitWithin } from '../../util/await-within.js'
import { item } from '../../util/item.js'

/** A reload that has not settled by then no longer holds off the next one (a hung master). */
const RELOAD_WAIT_MS = 5000

/** An error's first sentence: Redis quotes the command's first arguments (Lua source, keys) after it. */
function causeOf (error: unknown): string {
  return (error instanceof Error ? error.message : String(error)).replace(/, with args beginning with:.*$/s, '')
}

/*
 * How the store's calls reach Redis: by FCALL of the Functions library
 * (library.ts), which costs Redis less per call, unless a master refuses
 * FUNCTION LOAD (an ACL without @scripting's FUNCTION, a proxy or managed
 * service that disables it); then by EVALSHA of the scripts (scripts.ts),
 * loaded instead. Both are assembled from the same Lua files and decide alike.
 *
 * An FCALL refused as a command (NOPERM, unknown command) turns functions
 * off the same way. A call that meets "Function not found" (a restart
 * without persistence, FUNCTION FLUSH, a Cluster master added since) asks
 * for the library to be loaded again on every master, one load at a time.
 * Either call has run nothing: the dispatcher sends it again as EVAL of the
 * same script.
 */

/** Script numbers: 0 is the batch script, n (1…) the lone decision of algorithm n. */
export type ScriptNumber = number

export class ScriptRoute {
  readonly #batch: LoadedScript
  readonly #lone: readonly LoadedScript[]
  readonly #library: FunctionLibrary
  readonly #client: ClientPort
  #functions = true
  #loading: Promise<void> | undefined
  #log: StartupLog | undefined

  constructor (client: ClientPort, batch: LoadedScript, lone: readonly LoadedScript[], library: FunctionLibrary) {
    this.#client = client
    this.#batch = batch
    this.#lone = lone
    this.#library = library
  }

  /** Where a change of route is logged (the application's logger, from ready(), even when Redis was not there then). */
  useLog (log: StartupLog | undefined): void {
    this.#log = log
  }

  /** Whether calls go by FCALL (else EVALSHA). */
  get functions (): boolean {
    return this.#functions
  }

  /** What a call of script n names: its function while functions are on, else its SHA. */
  first (n: ScriptNumber): string {
    if (this.#functions) return n === 0 ? this.#library.batch : item(this.#library.lone, n - 1)
    return this.script(n).sha
  }

  /** Script n's source and SHA, for EVAL after NOSCRIPT or "Function not found". */
  script (n: ScriptNumber): LoadedScript {
    return n === 0 ? this.#batch : item(this.#lone, n - 1)
  }

  /** Every script, for the EVALSHA route's warm-up. */
  get scripts (): readonly LoadedScript[] {
    return [this.#batch, ...this.#lone]
  }

  /**
   * Loads the library on every master. A master that answers FUNCTION LOAD
   * with an error (other than "already exists", or one that says "not now":
   * LOADING, OOM…) turns functions off for good: the scripts are loaded
   * instead. A master that cannot be reached or is not ready leaves functions
   * on: its calls meet "Function not found" and load it then.
   */
  async load (masters: readonly MasterPort[]): Promise<void> {
    let refused: string | undefined
    await Promise.all(masters.map(async (node) => {
      try {
        await node.functionLoad(this.#library.source)
      } catch (error) {
        if (!isLibraryLoaded(error) && !isTransientRefusal(error) && this.#client.isServerError(error)) refused ??= `${node.address}: ${causeOf(error)}`
      }
    }))
    if (refused !== undefined) await this.#useScripts(masters, `FUNCTION LOAD refused (${refused})`)
  }

  /** FCALL itself was refused (an ACL changed since ready(), a proxy): EVALSHA from now on. */
  refuse (error: unknown): void {
    if (!this.#functions) return
    this.#functions = false
    this.#client.masters().then(async (masters) => { await this.#useScripts(masters, `FCALL refused (${causeOf(error)})`) }).catch(() => {})
  }

  async #useScripts (masters: readonly MasterPort[], cause: string): Promise<void> {
    this.#functions = false
    this.#log?.debug({ cause }, 'rate limit: Redis Functions refused, decisions go by EVALSHA')
    await Promise.all(masters.flatMap((node) => this.scripts.map(async ({ source }) => { await node.scriptLoad(source) }))).catch(() => {})
  }

  /**
   * A call met "Function not found": the library is loaded again on every
   * master, one load at a time, each waited for at most RELOAD_WAIT_MS
   * (failures are the next call's to retry).
   */
  reload (): void {
    if (this.#loading !== undefined || !this.#functions) return
    const loading = this.#client.masters().then(async (masters) => { await this.load(masters) })
    this.#loading = awaitWithin(loading, RELOAD_WAIT_MS, 'library reload').then(() => { this.#loading = undefined })
  }
}
