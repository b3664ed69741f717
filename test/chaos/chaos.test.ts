/**
 * The fault-schedule suite's fixed standalone seeds (test/chaos/README.md):
 * each runs a generated schedule of traffic and faults over instance
 * processes and a real Redis, and fails on any count, order or state
 * violation. Time bounds carry SLACK.shared here; `npm run chaos` enforces
 * them strictly and runs new seeds. The Cluster seeds: chaos-cluster.test.ts.
 */
import t from 'tap'
import { testSeeds } from './report.js'

testSeeds(t, [1])
