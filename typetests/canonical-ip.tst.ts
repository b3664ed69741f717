/*
 * The exported IP canonicaliser (docs/security.md), as a
 * `by` function would use it.
 */
import type { FastifyRequest } from 'fastify'
import { expect, test } from 'tstyche'
import { canonicalIp, type IdentityFunction } from '../lib/index.js'

declare const request: FastifyRequest

test('canonicalIp(raw, ipv6Subnet = 64): a string, or undefined for a non-IP', () => {
  expect(canonicalIp('2001:db8::1')).type.toBe<string | undefined>()
  expect(canonicalIp('2001:db8::1', 48)).type.toBe<string | undefined>()
  expect(canonicalIp(request.ip)).type.toBe<string | undefined>()
  expect(canonicalIp(undefined)).type.toBe<string | undefined>()
  expect(canonicalIp).type.not.toBeCallableWith(1234)
  expect(canonicalIp).type.not.toBeCallableWith('1.2.3.4', '64')
  const by: IdentityFunction = (req) => canonicalIp(req.ip)
  expect(by).type.toBeAssignableTo<IdentityFunction>()
})
