import type { FunctionLibrary, LoadedScript } from './lua.js'
import { isLibraryLoaded, isTransientRefusal, type ClientPort, type MasterPort } from './client/port.js'
import type { StartupLog } from '../port.js'
import { awaitWithin } from '../../util/await-within.js'

/** A reload that has not settled by then no longer holds off the next one (a hung master). */
const RELOAD_WAIT_MS = 5000

/** FCALL's arguments for a batch of no decisions (protocol.ts frameBatch): it answers Redis's time and changes nothing. */
const EMPTY_BATCH = [0, '', 0] as const

/** An error's first sentence: Redis quotes the command's first arguments (Lua source, keys) after it. */
function causeOf (error: unknown): string {
  return (error instanceof Error ? error.message : String(error)).replace(/, with args beginning with:.*$/s, '')
}

/*
 * How the store's calls reach Redis: by FCALL of the Functions library
 * (scripts/library.lua), which costs Redis less per call, unless a master
 * refuses FUNCTION LOAD (an ACL without @scripting's FUNCTION, a proxy or
 * managed service that disables it) and does not hold the library already
 * (an operator may load it by hand: docs/operations.md); then by EVALSHA of
 * the same batch driver as a script (scripts/eval-script.lua). Both are
 * generated from the same Lua fragments and decide alike.
 *
 * An FCALL refused as a command (NOPERM, unknown command) turns functions
 * off the same way. A call that meets "Function not found" (a restart
 * without persistence, FUNCTION FLUSH, a Cluster master added since) asks
 * for the library to be loaded again on every master, one load at a time.
 * Either call has run nothing: the dispatcher sends it again as EVAL of the
 * script.
 */

export class ScriptRoute {
  readonly script: LoadedScript
  readonly #library: FunctionLibrary
  readonly #client: ClientPort
  #functions = true
  #loading: Promise<void> | undefined
  #log: StartupLog | undefined

  constructor (client: ClientPort, script: LoadedScript, library: FunctionLibrary) {
    this.#client = client
    this.script = script
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

  /** What a call names: the library's function while functions are on, else the script's SHA. */
  first (): string {
    return this.#functions ? this.#library.batch : this.script.sha
  }

  /**
   * Loads the library on every master. A master that answers FUNCTION LOAD
   * with an error (other than "already exists", or one that says "not now":
   * LOADING, OOM…) and does not answer an FCALL of the library either turns
   * functions off for good: the script is loaded instead. A master that
   * cannot be reached or is not ready leaves functions on: its calls meet
   * "Function not found" and load it then.
   */
  async load (masters: readonly MasterPort[]): Promise<void> {
    let refused: string | undefined
    await Promise.all(masters.map(async (node) => {
      try {
        await node.functionLoad(this.#library.source)
      } catch (error) {
        if (isLibraryLoaded(error) || isTransientRefusal(error) || !this.#client.isServerError(error)) return
        if (await this.#loadedByHand(node, error)) return
        refused ??= `${node.address}: ${causeOf(error)}`
      }
    }))
    if (refused !== undefined) await this.#useScript(masters, `FUNCTION LOAD refused (${refused})`)
  }

  /** Whether a master that refused FUNCTION LOAD answers FCALL of this version's function all the same. */
  async #loadedByHand (node: MasterPort, loadError: unknown): Promise<boolean> {
    try {
      await node.functionCall(this.#library.batch, EMPTY_BATCH)
    } catch {
      return false
    }
    this.#log?.debug({ master: node.address, cause: causeOf(loadError), library: this.#library.name }, 'rate limit: FUNCTION LOAD refused; the library found loaded is called')
    return true
  }

  /** FCALL itself was refused (an ACL changed since ready(), a proxy): EVALSHA from now on. */
  refuse (error: unknown): void {
    if (!this.#functions) return
    this.#functions = false
    this.#client.masters().then(async (masters) => { await this.#useScript(masters, `FCALL refused (${causeOf(error)})`) }).catch(() => {})
  }

  async #useScript (masters: readonly MasterPort[], cause: string): Promise<void> {
    this.#functions = false
    this.#log?.debug({ cause }, 'rate limit: Redis Functions refused, decisions go by EVALSHA')
    await Promise.all(masters.map(async (node) => { await node.scriptLoad(this.script.source) })).catch(() => {})
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
