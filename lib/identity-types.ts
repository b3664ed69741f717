import type { FastifyRequest } from 'fastify'

/*
 * The public identity types, apart from the identity compiler, so the public
 * type module (types.ts) sits below every implementation module.
 */

export type IdentityFunction = (request: FastifyRequest) => string | undefined
export type IdentityPartSpec = 'ip' | 'user' | 'api-key' | `header:${string}` | `param:${string}` | `body:${string}` | IdentityFunction
