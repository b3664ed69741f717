/**
 * The rest of the fixed standalone seeds (chaos.test.ts says what they are):
 * a file of their own so tap runs them beside seeds 1 and 4.
 */
import t from 'tap'
import { testSeeds } from './report.js'

/*
 * 5: a slot kept, a give-back in the next window, a slot released at admission on a
 * POST decided at preHandler; 18: a deny-cache entry kept after a give-back. Both
 * also found constrained routes sharing a counter.
 */
testSeeds(t, [5, 18])
