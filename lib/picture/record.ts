import type { InstancePicture } from '../types/index.js'

/*
 * One instance's picture as published (publisher.ts) and read back by the
 * CLI and the console page (fleet.ts). JSON, versioned by `format`: a reader
 * skips a picture of a format it does not know, so a rolling deploy that
 * changes it shows the instances it can read and says how many it cannot.
 */

export const PICTURE_FORMAT = 1

/** A published picture, or undefined when the JSON is not one this version reads. */
export function parsePicture (json: string): InstancePicture | undefined {
  let value: unknown
  try {
    value = JSON.parse(json)
  } catch {
    return undefined
  }
  if (value === null || typeof value !== 'object') return undefined
  const picture = value as Partial<InstancePicture>
  if (picture.format !== PICTURE_FORMAT || typeof picture.id !== 'string' || !Array.isArray(picture.routes) || !Array.isArray(picture.top) || !Array.isArray(picture.policies)) return undefined
  return picture as InstancePicture
}
