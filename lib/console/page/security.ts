import { randomBytes, timingSafeEqual } from 'node:crypto'
import type { FastifyReply, FastifyRequest } from 'fastify'
import { FST_RRL_CONSOLE_BAD_TOKEN, FST_RRL_CONSOLE_FORBIDDEN } from '../../errors.js'

/*
 * The console's guards (docs/console.md, "Security"). Every console request
 * passes `authorize` (after the rate limit's decision, before validation or
 * any handler); a change is a POST that carries the page's token in a header
 * equal to its SameSite=Strict, HttpOnly cookie (a double submit: another
 * site can neither read the token nor send the header: the console's
 * answers carry no CORS header, whatever the app registered) and, where the browser says
 * where it comes from (Sec-Fetch-Site, Origin), comes from the console's
 * own origin. No session is kept: any instance of the fleet checks any
 * page's token.
 */

export const TOKEN_HEADER = 'x-console-token'
export const TOKEN_COOKIE = 'rrl-console-token'
const TOKEN_FORM = /^[A-Za-z0-9_-]{43}$/

/** A fresh token: 256 random bits, base64url. */
export const newToken = (): string => randomBytes(32).toString('base64url')

/** The console's token cookie of the request, when it holds a well-formed one. */
export function cookieToken (request: FastifyRequest): string | undefined {
  const header = request.headers.cookie
  if (typeof header !== 'string') return undefined
  for (const part of header.split(';')) {
    const eq = part.indexOf('=')
    if (eq < 0 || part.slice(0, eq).trim() !== TOKEN_COOKIE) continue
    const value = part.slice(eq + 1).trim()
    if (TOKEN_FORM.test(value)) return value
  }
  return undefined
}

/** The Set-Cookie value that binds `token` to this browser, for the console's path only. */
export function tokenCookie (token: string, path: string, secure: boolean): string {
  return `${TOKEN_COOKIE}=${token}; Path=${path}; HttpOnly; SameSite=Strict${secure ? '; Secure' : ''}`
}

/** The host of an origin (default ports dropped), or undefined when it is none. */
function hostOf (origin: string): string | undefined {
  try {
    return new URL(origin).host
  } catch {
    return undefined
  }
}

/** Why a change request fails the same-site checks, or undefined when it passes. */
export function changeRefusal (request: FastifyRequest): string | undefined {
  const site = request.headers['sec-fetch-site']
  if (site !== undefined && site !== 'same-origin') return `sent from ${String(site)}, not the console's origin`
  const origin = request.headers.origin
  if (origin !== undefined && (hostOf(origin) ?? '') !== hostOf(`${request.protocol}://${request.host}`)) return 'its Origin is not the console\'s host'
  const sent = request.headers[TOKEN_HEADER]
  const held = cookieToken(request)
  if (typeof sent !== 'string' || held === undefined || !TOKEN_FORM.test(sent)) return 'no token, or no token cookie (reload the page)'
  if (!timingSafeEqual(Buffer.from(sent), Buffer.from(held))) return 'the token does not match its cookie (reload the page)'
  return undefined
}

/**
 * The preParsing guard of every console route (after the rate limit's
 * decision, before the body is read): `authorize` first (a throw or anything
 * but `true` is a refusal), then, for a POST, the token.
 */
export function guard (authorize: ((request: FastifyRequest) => boolean | Promise<boolean>) | undefined) {
  return async function consoleGuard (request: FastifyRequest, _reply: FastifyReply, _payload: unknown): Promise<void> {
    if (authorize !== undefined) {
      let allowed: unknown
      try {
        allowed = await authorize(request)
      } catch (error) {
        request.log.warn({ err: error }, 'rate limit console: authorize threw; the request is refused (403)')
      }
      if (allowed !== true) throw new FST_RRL_CONSOLE_FORBIDDEN()
    }
    if (request.method === 'POST') {
      const refusal = changeRefusal(request)
      if (refusal !== undefined) throw new FST_RRL_CONSOLE_BAD_TOKEN(refusal)
    }
  }
}

/** Headers on every console answer: nothing else may script, frame or cache it. */
export const SECURITY_HEADERS: Record<string, string> = {
  'content-security-policy': "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
  'x-frame-options': 'DENY',
  'cache-control': 'no-store'
}
