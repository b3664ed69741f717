/** The fault-schedule suite's fixed Cluster seeds (3 masters, slot migrations): see chaos.test.ts. */
import t from 'tap'
import { testSeeds } from './report.js'

// Three slot migrations, two skewed clocks, a throwing metrics exporter (it found that one and shared counters before their fixes).
testSeeds(t, [9])
