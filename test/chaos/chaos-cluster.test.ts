/** The fault-schedule suite's fixed Cluster seeds (3 masters, slot migrations): see chaos.test.ts. */
import t from 'tap'
import { testSeeds } from './report.js'

testSeeds(t, [9])
