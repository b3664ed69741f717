/*
 * The concurrency kind's bounds: how many slots, how long a lease, what a
 * refused slot answers. The policy compiler, the options and both stores
 * (scripts/concurrency.lua through the prelude line) read them here.
 */

/** Slots per identity, at most: one sorted-set member each (listpack up to 128). */
export const MAX_CONCURRENCY = 10_000
/** The lease of a slot: default, and the bounds of the `lease` option. */
export const DEFAULT_LEASE_MS = 60_000
export const MIN_LEASE_MS = 1000
export const MAX_LEASE_MS = 86_400_000
/** A refused slot's retry delay: a slot may free at any moment (Retry-After: 1). */
export const SLOT_RETRY_MS = 1000
/** A concurrency block's `wait`, at most: a waiting request keeps its socket and memory that long. */
export const MAX_WAIT_MS = 60_000
/**
 * The pub/sub channel a slot's release (or a waiter's leaving) is announced
 * on when waiters remain, the slot key as message (scripts/concurrency.lua).
 * One channel for every key: an instance looks the key up among its waiters.
 */
export const WAKE_CHANNEL = 'frrl:slots'
