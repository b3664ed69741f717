/**
 * The fault-schedule suite's fixed standalone seeds (test/chaos/README.md):
 * each runs a generated schedule of traffic and faults over instance
 * processes and a real Redis, and fails on any count, order or state
 * violation. Time bounds carry SLACK.shared here; `npm run chaos` enforces
 * them strictly and runs new seeds. Seeds 5 and 18: chaos-more.test.ts (two
 * files, so tap runs them beside each other); the Cluster seeds: chaos-cluster.test.ts.
 */
import t from 'tap'
import { testSeeds } from './report.js'

/*
 * Each found a defect of issue 29 on the code before its fix (README.md, "Fixed seeds"):
 * 1 the breaker left open by a WRONGTYPE probe; 4 a throwing metrics exporter, an
 * override lifted by a fast clock, a slot kept after a stall. Both also found
 * constrained routes sharing a counter. 4 also finds a slot released at admission on a POST
 * decided at preHandler (a consumed request stream taken for a client that left).
 */
testSeeds(t, [1, 4])
