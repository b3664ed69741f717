import type { FastifyReply, FastifyRequest } from 'fastify'
import type { DecisionInput, Evaluation, Runtime } from '../decide/evaluate.js'
import { holdSlots } from '../decide/slots.js'

/*
 * A request's concurrency slots are given back once, when its raw response
 * closes: after the reply finished, on a client abort (the connection
 * closed), on a timeout that destroyed the socket. Not per Fastify hook:
 * onError and onResponse both fire for one request, and onTimeout only on
 * connectionTimeout. A handler that goes on working after an abort must watch
 * `request.signal` itself: its slot is free from the moment the connection closed.
 */

/** Holds the slots the decision took, until the raw response closes (at once when it already has). */
export function holdUntilClose (request: FastifyRequest, reply: FastifyReply, input: DecisionInput, evaluation: Evaluation, runtime: Runtime): void {
  const held = holdSlots(runtime, input, evaluation, request.log)
  if (held === undefined) return
  const raw = reply.raw
  // The connection may have closed while the store decided: no 'close' event is coming then.
  if (raw.closed || raw.destroyed || request.raw.destroyed) {
    held.release()
    return
  }
  raw.once('close', held.release)
}
