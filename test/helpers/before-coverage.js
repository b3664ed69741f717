/*
 * tap `before` step: empties .tap/node-v8, where Node writes its own V8
 * coverage because .taprc sets NODE_V8_COVERAGE for the test processes (see
 * there), so that directory holds one run at most instead of growing forever.
 */
import { rmSync } from 'node:fs'

rmSync(new URL('../../.tap/node-v8', import.meta.url), { recursive: true, force: true })
