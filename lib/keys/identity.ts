import type { FastifyRequest } from 'fastify'
import type { IdentityFunction, IdentityPartSpec } from '../types/index.js'
import { canonicalIp } from './ip.js'
import { boundIdentity, identityHasher, type ValueHasher } from './layout.js'
import { awaitWithin, isThenable, type Outcome } from '../util/await-within.js'
import { DEFAULT_IDENTITY_TIMEOUT_MS } from '../limits.js'

/*
 * An identity is a list of parts, each rendered as `<label>=<value>`, or as
 * `<label>~<ip>` when the part is missing and falls back to the client IP.
 * Labels are fixed per route, so the rendering is one-to-one; the fallback
 * never pools unrelated callers (it is per IP) and never errors.
 */

export type { IdentityFunction, IdentityPartSpec } from '../types/index.js'

/** What every part may log about itself: its kind, never its value. */
export type IdentityKind = 'ip' | 'user' | 'api-key' | 'header' | 'param' | 'body' | 'custom'

export interface IdentityContext {
  user?: IdentityFunction | undefined
  apiKey?: IdentityFunction | undefined
  ipv6Subnet: number
  /** HMAC key for identity hashes (plugin option `hashSecret`); plain SHA-256 without it. */
  hashSecret?: Buffer | undefined
  /**
   * Called when a user-supplied identity function throws or returns something
   * unusable (an object, a symbol, NaN, a Promise...); the part then falls back to the IP.
   */
  onPartError: (kind: IdentityKind, error: unknown, route: string) => void
  /** Milliseconds an async identity function may take (plugin option `identityTimeout`); default 100. */
  identityTimeout?: number | undefined
}

interface CompiledPart {
  label: string
  kind: IdentityKind
  /** Returns the raw value, or undefined when the request does not carry it. */
  read: (request: FastifyRequest) => unknown
}

export interface CompiledIdentity {
  /**
   * Renders the identity for one request: bounded, hashed where it must be.
   * A Promise only when an identity function returned one (it never rejects).
   */
  resolve: (request: FastifyRequest) => string | Promise<string>
  /** The same identity from values a caller names (the programmatic API). */
  resolveInput: (input: IdentityInput) => string | Promise<string>
  kinds: IdentityKind[]
  needsBody: boolean
  usesParams: boolean
}

/** What the programmatic API takes to name a caller (RateLimitIdentity in types.ts). */
export interface IdentityInput {
  ip?: string | undefined
  user?: string | undefined
  apiKey?: string | undefined
  headers?: Record<string, string> | undefined
  params?: Record<string, string> | undefined
  body?: Record<string, unknown> | undefined
}

const API_INPUT = Symbol('rateLimit.identityInput')
interface ApiRequest { [API_INPUT]: IdentityInput }

/** A request-like object for the API: what `by` parts and function parts read. */
function apiRequest (input: IdentityInput): FastifyRequest {
  const headers: Record<string, string> = {}
  for (const [name, value] of Object.entries(input.headers ?? {})) headers[name.toLowerCase()] = value
  return { ip: input.ip, headers, params: input.params ?? {}, body: input.body, socket: { remoteAddress: input.ip }, [API_INPUT]: input } as unknown as FastifyRequest
}

/** The client address: Fastify's request.ip (trustProxy decides), else the socket's, canonical. */
export function clientIp (request: FastifyRequest, ipv6Subnet: number): string {
  return canonicalIp(request.ip, ipv6Subnet) ??
    canonicalIp(request.socket?.remoteAddress, ipv6Subnet) ??
    'unknown'
}

/**
 * The text of an identity value, or undefined when it has none: a non-empty
 * string, a finite number, or a non-empty array of strings (a repeated header).
 * Anything else (objects, symbols, NaN, booleans, Promises) is no identity, and
 * the part falls back to the client IP.
 */
function textValue (value: unknown): string | undefined {
  if (typeof value === 'string') return value.length > 0 ? value : undefined
  if (typeof value === 'number' && Number.isFinite(value)) return String(value)
  if (Array.isArray(value) && value.length > 0 && value.every((item) => typeof item === 'string')) {
    return value.join(',')
  }
  return undefined
}

/** Kinds whose values come from code the application wrote, whose mistakes are worth a log line. */
const FUNCTION_KINDS = new Set<IdentityKind>(['user', 'api-key', 'custom'])

/** The type of an unusable value, for the log: never the value itself, which may be a secret. */
function describeValue (value: unknown): string {
  if (typeof value === 'number') return String(value) // NaN or ±Infinity
  if (Array.isArray(value)) return value.length === 0 ? 'an empty array' : 'an array that is not all strings'
  return value === null ? 'null' : typeof value === 'object' ? 'an object' : `a ${typeof value}`
}

function readField (container: unknown, field: string): unknown {
  if (container === null || typeof container !== 'object') return undefined
  return Object.hasOwn(container, field) ? (container as Record<string, unknown>)[field] : undefined
}

/**
 * Compiles one `by` spec. Returns an error message for an unknown or unusable
 * part, so the caller can raise a coded error naming the route and field.
 */
export function compilePart (spec: IdentityPartSpec, index: number, context: IdentityContext): CompiledPart | string {
  if (typeof spec === 'function') return { label: `f${index}`, kind: 'custom', read: spec }
  if (typeof spec !== 'string') return `has an identity part that is neither a string nor a function (${typeof spec})`
  if (spec === 'ip') return { label: 'ip', kind: 'ip', read: () => undefined }
  if (spec === 'user') {
    const user = context.user
    if (user === undefined) return "uses 'user', which needs the plugin option `user: (request) => string | undefined`"
    return { label: 'u', kind: 'user', read: user }
  }
  if (spec === 'api-key') {
    const apiKey = context.apiKey
    if (apiKey === undefined) {
      return "uses 'api-key', which needs the plugin option `apiKey: (request) => string | undefined`"
    }
    return { label: 'k', kind: 'api-key', read: apiKey }
  }
  const colon = spec.indexOf(':')
  const kind = colon === -1 ? spec : spec.slice(0, colon)
  const name = colon === -1 ? '' : spec.slice(colon + 1)
  if (name === '' && (kind === 'header' || kind === 'param' || kind === 'body')) {
    return `needs a name after '${kind}:' (got ${JSON.stringify(spec)})`
  }
  switch (kind) {
    case 'header': {
      const header = name.toLowerCase()
      return { label: `h${index}`, kind: 'header', read: (request) => request.headers[header] }
    }
    case 'param':
      return { label: `p${index}`, kind: 'param', read: (request) => readField(request.params, name) }
    case 'body':
      return { label: `b${index}`, kind: 'body', read: (request) => readField(request.body, name) }
    default:
      return `has an unknown identity part ${JSON.stringify(spec)} (use 'ip', 'user', 'api-key', 'header:<name>', 'param:<name>', 'body:<field>' or a function)`
  }
}

/** The default identity: the user when `user(request)` gives one, else the IP. */
function defaultParts (context: IdentityContext): CompiledPart[] {
  if (context.user === undefined) return [{ label: 'ip', kind: 'ip', read: () => undefined }]
  return [{ label: 'u', kind: 'user', read: context.user }]
}

/** The parts a `by` spec names (the default identity when it names none), or an error message. */
function compileParts (
  by: IdentityPartSpec | IdentityPartSpec[] | undefined,
  context: IdentityContext
): CompiledPart[] | string {
  if (by === undefined) return defaultParts(context)
  const specs = Array.isArray(by) ? by : [by]
  if (specs.length === 0) return 'must name at least one identity part'
  const parts: CompiledPart[] = []
  for (const [index, spec] of specs.entries()) {
    const part = compilePart(spec, index, context)
    if (typeof part === 'string') return part
    parts.push(part)
  }
  return parts
}

/** What rendering one route's identity needs, fixed at compile time. */
interface Renderer {
  route: string
  ipv6Subnet: number
  timeoutMs: number
  hash: ValueHasher
  onPartError: IdentityContext['onPartError']
}

/** A missing part falls back to the client's own IP: never a shared bucket. */
function fallback (part: CompiledPart, request: FastifyRequest, renderer: Renderer): string {
  return part.label + '~' + clientIp(request, renderer.ipv6Subnet)
}

/** What a part's value renders as; an unusable one from application code is logged. */
function renderValue (part: CompiledPart, request: FastifyRequest, raw: unknown, renderer: Renderer): string {
  const value = textValue(raw)
  if (value === undefined && raw !== undefined && raw !== null && raw !== '' && FUNCTION_KINDS.has(part.kind)) {
    renderer.onPartError(part.kind, new TypeError(`returned ${describeValue(raw)}`), renderer.route)
  }
  return value === undefined ? fallback(part, request, renderer) : part.label + '=' + renderer.hash(value)
}

function renderOutcome (part: CompiledPart, request: FastifyRequest, outcome: Outcome, renderer: Renderer): string {
  if (outcome.ok) return renderValue(part, request, outcome.value, renderer)
  const error = outcome.error instanceof Error ? outcome.error : new TypeError(`rejected with ${describeValue(outcome.error)}`)
  renderer.onPartError(part.kind, error, renderer.route)
  return fallback(part, request, renderer)
}

function renderPart (part: CompiledPart, request: FastifyRequest, renderer: Renderer): string | Promise<string> {
  if (part.kind === 'ip') return 'ip=' + clientIp(request, renderer.ipv6Subnet)
  let raw: unknown
  try {
    raw = part.read(request)
  } catch (error) {
    // Whatever was thrown (even an object that cannot be turned into a string) is logged safely.
    renderer.onPartError(part.kind, error instanceof Error ? error : new TypeError(`threw ${describeValue(error)}`), renderer.route)
    return fallback(part, request, renderer)
  }
  // An async function is awaited, bounded by identityTimeout; only this path creates a promise.
  if (isThenable(raw)) {
    return awaitWithin(raw, renderer.timeoutMs, 'identityTimeout').then((outcome) => renderOutcome(part, request, outcome, renderer))
  }
  return renderValue(part, request, raw, renderer)
}

/** The parts of one identity, joined and bounded; a Promise only when some part is one. */
function renderAll (
  parts: readonly CompiledPart[],
  request: FastifyRequest,
  renderer: Renderer
): string | Promise<string> {
  const only = parts[0]
  if (parts.length === 1 && only !== undefined) {
    const text = renderPart(only, request, renderer)
    return typeof text === 'string' ? boundIdentity(text) : text.then(boundIdentity)
  }
  const rendered = new Array<string | Promise<string>>(parts.length)
  let pending = false
  for (const [index, part] of parts.entries()) {
    const text = renderPart(part, request, renderer)
    if (typeof text !== 'string') pending = true
    rendered[index] = text
  }
  if (pending) return Promise.all(rendered).then((texts) => boundIdentity(texts.join(',')))
  // None is pending: every part rendered to a string.
  return boundIdentity(rendered.join(','))
}

/**
 * The parts the programmatic API renders (fastify.rateLimit.peek/consume/reset):
 * `user` and `apiKey` are taken as the caller gives them instead of calling the plugin option.
 */
function apiParts (parts: readonly CompiledPart[]): CompiledPart[] {
  return parts.map((part): CompiledPart => part.kind === 'user'
    ? { ...part, read: (request) => (request as unknown as ApiRequest)[API_INPUT].user }
    : part.kind === 'api-key' ? { ...part, read: (request) => (request as unknown as ApiRequest)[API_INPUT].apiKey } : part)
}

export function compileIdentity (
  by: IdentityPartSpec | IdentityPartSpec[] | undefined,
  context: IdentityContext,
  route: string
): CompiledIdentity | string {
  const parts = compileParts(by, context)
  if (typeof parts === 'string') return parts
  const renderer: Renderer = {
    route,
    ipv6Subnet: context.ipv6Subnet,
    timeoutMs: context.identityTimeout ?? DEFAULT_IDENTITY_TIMEOUT_MS,
    hash: identityHasher(context.hashSecret),
    onPartError: context.onPartError
  }
  const forApi = apiParts(parts)
  return {
    resolve: (request) => renderAll(parts, request, renderer),
    resolveInput: (input) => renderAll(forApi, apiRequest(input), renderer),
    kinds: parts.map((part) => part.kind),
    needsBody: parts.some((part) => part.kind === 'body'),
    usesParams: parts.some((part) => part.kind === 'param')
  }
}
