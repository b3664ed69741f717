import type { FastifyBaseLogger } from 'fastify'
import { randomBytes } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { hostname } from 'node:os'
import { performance } from 'node:perf_hooks'
import type { PictureBoard } from '../store/port.js'
import type { PolicySummary, RateLimitStats } from '../types/index.js'
import type { PictureCounters } from './counters.js'
import { PICTURE_FORMAT } from './record.js'
import type { InstancePicture, NodeHealth, PictureCaller } from '../types/index.js'

/*
 * Publishes this instance's picture (record.ts) once per interval: one store
 * call (port.ts PictureBoard), lapsing after PICTURE_TTL_INTERVALS intervals
 * so a dead instance drops out by itself; withdrawn at close so a deploy's
 * old instances leave the view at once. Never on the request path: the
 * request path only counts in memory (counters.ts).
 */

/** Intervals a picture stays without a new one: a missed publish or two (a slow Redis, a long GC) does not hide a live instance. */
export const PICTURE_TTL_INTERVALS = 3

function packageVersion (): string {
  try {
    const json = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version?: unknown }
    return typeof json.version === 'string' ? json.version : 'unknown'
  } catch {
    return 'unknown'
  }
}

export interface PictureSources {
  /** The app's id (one per Fastify server, shared by its registrations). */
  app: string
  board: PictureBoard
  counters: PictureCounters
  store: { kind: 'redis' | 'memory', cluster: boolean, health: () => NodeHealth[] }
  stats: () => RateLimitStats
  policies: () => PolicySummary[]
  fleet: () => { bans: number, overrides: number }
  /** The identity part of a key hashed as the plugin hashes identities (HMAC with hashSecret). */
  hash: (identity: string) => string
  /** Whether identities are hashed with a hashSecret. */
  hashSecret: boolean
  ipv6Subnet: number
  /** Publish identities as they are in keys, beside their hash (`picture.rawIdentities`). */
  rawIdentities: boolean
  intervalMs: number
  log: FastifyBaseLogger
}

/** `<host>-<pid>-<random>`: a new id for a registration or an app. */
export function pictureId (): string {
  return `${hostname()}-${process.pid}-${randomBytes(3).toString('hex')}`
}

export class PicturePublisher {
  readonly id = pictureId()
  readonly #sources: PictureSources
  readonly #version = packageVersion()
  /** The process's start. */
  readonly #startedAt = Math.round(performance.timeOrigin)
  #timer: NodeJS.Timeout | undefined
  #publishing: Promise<void> | undefined
  #closed = false

  constructor (sources: PictureSources) {
    this.#sources = sources
  }

  /** The picture of the interval that just ended (the counters start a new one). */
  picture (): InstancePicture {
    const sources = this.#sources
    const { rows, callers } = sources.counters.take()
    const now = Date.now()
    const top = callers.map(({ route, callers }) => ({
      route,
      callers: callers.map(({ identity, count, error }): PictureCaller => {
        const caller: PictureCaller = { hash: sources.hash(identity), count, error }
        if (sources.rawIdentities) caller.identity = identity
        return caller
      })
    }))
    return {
      format: PICTURE_FORMAT,
      id: this.id,
      app: sources.app,
      version: this.#version,
      host: hostname(),
      pid: process.pid,
      startedAt: this.#startedAt,
      publishedAt: now,
      uptimeMs: Math.round(process.uptime() * 1000),
      intervalMs: sources.intervalMs,
      store: { kind: sources.store.kind, cluster: sources.store.cluster, nodes: sources.store.health() },
      stats: sources.stats(),
      routes: rows,
      top,
      policies: sources.policies(),
      hashSecret: sources.hashSecret,
      ipv6Subnet: sources.ipv6Subnet,
      ...sources.fleet()
    }
  }

  /** Publishes now; a failure is logged at debug and the next interval tries again (the picture is not worth a warning per interval). */
  async publish (): Promise<void> {
    if (this.#closed) return
    const { board, intervalMs, log } = this.#sources
    try {
      await board.publish(this.id, JSON.stringify(this.picture()), intervalMs * PICTURE_TTL_INTERVALS)
    } catch (error) {
      log.debug({ cause: (error as Error).message }, 'rate limit picture not published; trying again next interval')
    }
  }

  /** Publishes at ready, then every interval (never keeping the process alive); one publish at a time. */
  start (): void {
    const tick = (): void => {
      if (this.#publishing !== undefined) return
      this.#publishing = this.publish().finally(() => { this.#publishing = undefined })
    }
    tick()
    this.#timer = setInterval(tick, this.#sources.intervalMs)
    this.#timer.unref()
  }

  /** Stops publishing and withdraws the picture, awaited at close (the caller bounds it by `timeout`). */
  async close (): Promise<void> {
    this.#closed = true
    clearInterval(this.#timer)
    await this.#publishing
    await this.#sources.board.withdraw(this.id)
  }
}
