/*
 * What the concurrency script is built with beside its run's numbers: what a
 * refused slot answers, and where a release is announced. Both stores
 * (scripts/concurrency.lua through the prelude line) read them here. The
 * kind's bounds (slots, lease, wait) are in the limits table, lib/limits.ts.
 */

/** A refused slot's retry delay: a slot may free at any moment (Retry-After: 1). */
export const SLOT_RETRY_MS = 1000
/**
 * The pub/sub channel a slot's release (or a waiter's leaving) is announced
 * on when waiters remain, the slot key as message (scripts/concurrency.lua).
 * One channel for every key: an instance looks the key up among its waiters.
 */
export const WAKE_CHANNEL = 'frrl:slots'
