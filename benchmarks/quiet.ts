import { readFileSync } from 'node:fs'
import { sleep } from './common.js'

/*
 * The quiet-machine gate. Figures taken while other work holds the cores tell
 * nothing (issue 17: load averages of 8–20 on 2 cores), so before every run
 * the harness waits until the 1-minute load average is below `maxLoad`, for at
 * most `waitS` seconds, and records what it found. A run that started above
 * the threshold is kept but marked: its figures are not quotable and no
 * target verdict is stated from it.
 */

/** How a run started: below the threshold, above it after the whole wait, or above it with the wait off (--quick, --load-wait 0). */
export type GateOutcome = 'quiet' | 'timeout' | 'unchecked'

export interface Gate {
  gate: GateOutcome
  /** 1-minute load average when the run started (NaN where /proc/loadavg is unreadable). */
  loadStart: number
  /** Seconds spent waiting for it. */
  waitedS: number
}

export interface GateOptions {
  maxLoad: number
  /** At most this many seconds of waiting; 0: record the load, never wait. */
  waitS: number
}

/** The 1-minute load average (/proc/loadavg), NaN when unreadable. */
export function loadAverage (): number {
  try {
    return Number(readFileSync('/proc/loadavg', 'utf8').split(' ')[0])
  } catch {
    return Number.NaN
  }
}

const POLL_MS = 2_000
const REPORT_EVERY_S = 30

/** Waits (bounded) until the 1-minute load average is below the threshold; `what` names the run in progress lines. */
export async function waitForQuiet (what: string, options: GateOptions): Promise<Gate> {
  const started = Date.now()
  const waited = (): number => (Date.now() - started) / 1000
  let load = loadAverage()
  if (!Number.isFinite(load)) return { gate: 'unchecked', loadStart: load, waitedS: 0 }
  if (load < options.maxLoad) return { gate: 'quiet', loadStart: load, waitedS: 0 }
  if (options.waitS <= 0) return { gate: 'unchecked', loadStart: load, waitedS: 0 }
  process.stderr.write(`  ${what}: waiting for the 1-minute load average (${load.toFixed(2)}) to fall below ${options.maxLoad} (at most ${options.waitS} s)\n`)
  let reported = 0
  while (load >= options.maxLoad && waited() < options.waitS) {
    await sleep(Math.min(POLL_MS, Math.max(0, options.waitS * 1000 - (Date.now() - started))))
    load = loadAverage()
    if (waited() - reported >= REPORT_EVERY_S) {
      reported = waited()
      process.stderr.write(`  ${what}: load ${load.toFixed(2)} after ${Math.round(reported)} s\n`)
    }
  }
  const gate: GateOutcome = load < options.maxLoad ? 'quiet' : 'timeout'
  if (gate === 'timeout') process.stderr.write(`  ${what}: load still ${load.toFixed(2)} after ${options.waitS} s: running anyway, marked not quotable\n`)
  return { gate, loadStart: load, waitedS: waited() }
}

/** What a run's conditions allow: quotable, or the reason it is not. */
export interface Conditions extends Gate {
  loadEnd: number
  otherCpuPercent: number
}

/** Why a run's figures may not be quoted, or undefined when they may. */
export function notQuotable (run: Conditions, limits: { maxLoad: number, maxOther: number }): string | undefined {
  if (run.gate === 'timeout') return `started at load ${run.loadStart.toFixed(2)} (≥ ${limits.maxLoad}) after the whole wait`
  if (run.gate === 'unchecked') return Number.isFinite(run.loadStart) ? `started at load ${run.loadStart.toFixed(2)} (≥ ${limits.maxLoad}) without waiting` : 'load average unreadable'
  if (run.otherCpuPercent > limits.maxOther) return `other processes used ${run.otherCpuPercent.toFixed(0)} % CPU (> ${limits.maxOther})`
  return undefined
}
