import type { FastifyRequest } from 'fastify'

/*
 * The public identity types, apart from the identity compiler, so the public
 * type module (types.ts) sits below every implementation module.
 */

/** Sync, or async (awaited at most `identityTimeout` ms; a rejection or an overrun falls back to the client IP). */
export type IdentityFunction = (request: FastifyRequest) => string | undefined | Promise<string | undefined>
export type IdentityPartSpec = 'ip' | 'user' | 'api-key' | `header:${string}` | `param:${string}` | `body:${string}` | IdentityFunction
