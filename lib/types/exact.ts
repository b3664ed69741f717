import type { FastifyContextConfig } from 'fastify'
import type { AnyRateLimitBlock, RateLimitConcurrencyBlock, RateLimitPenalty, RateLimitPeriodBlock, RateLimitWindowBlock } from './block.js'
import type { RouteRateLimit } from './options.js'

/*
 * `config.rateLimit` held to its block kind's fields. Fastify infers a route's
 * config from the literal (`config?: FastifyContextConfig & ContextConfig`),
 * so the literal's own type is part of the target and TypeScript's
 * excess-property check finds nothing there. The property's type reads the
 * literal instead: `this` in an interface that is a member of an intersection
 * is the intersection, `Added` takes FastifyContextConfig back off it, and
 * each block is compared with its kind. A field the kind does not take, or a
 * value of another type, gets a type that names it, so the error stands on
 * that field and says which it is. Wherever nothing was inferred (reading
 * `request.routeOptions.config`, an explicit type argument) it is plain
 * RouteRateLimit. The plugin options' blocks need none of this: they are not
 * inferred, so TypeScript's own excess-property check names the field.
 */

/** What the route's literal added to FastifyContextConfig; unknown when nothing was inferred. */
type Added<Config> = Config extends FastifyContextConfig & infer Own ? Own : unknown

/** The keys of B with a value: not those typed only `undefined` (TypeScript adds its array neighbours' keys to a literal so) or `never`. */
type GivenKeys<B> = keyof B & { [K in keyof B]-?: [Exclude<B[K], undefined>] extends [never] ? never : K }[keyof B]

/** The kind a block declares, as the runtime reads it (`readKind`): `concurrency`, else `period`, else `window`. */
type KindOf<B> = 'concurrency' extends GivenKeys<B>
  ? [RateLimitConcurrencyBlock, 'RateLimitConcurrencyBlock']
  : 'period' extends GivenKeys<B> ? [RateLimitPeriodBlock, 'RateLimitPeriodBlock'] : [RateLimitWindowBlock, 'RateLimitWindowBlock']

/** Whether A becomes B by one edit: a character replaced, added, removed, or two neighbours swapped. */
type OneEdit<A extends string, B extends string> =
  A extends `${infer X}${infer RestA}`
    ? B extends `${infer Y}${infer RestB}`
      ? X extends Y ? OneEdit<RestA, RestB>
        : RestA extends RestB ? true
          : RestA extends B ? true
            : A extends RestB ? true
              : RestA extends `${Y}${infer After}` ? RestB extends `${X}${After}` ? true : false : false
      : RestA extends '' ? true : false
    : B extends `${string}${infer RestB}` ? RestB extends '' ? true : false : true

/** The fields of Kind one edit (case aside) from Name. */
type Near<Name extends string, Fields extends string> = Fields extends Fields
  ? OneEdit<Lowercase<Name>, Lowercase<Fields>> extends true ? Fields : never
  : never

type Suggest<Name extends string, Fields extends string> = [Near<Name, Fields>] extends [never] ? '' : `. Did you mean '${Near<Name, Fields>}'?`

/** The type of a field the block's kind does not take: its one property says so. */
type DoesNotExist<Name, In extends string, Fields extends string> = Name extends string
  ? { [Message in `'${Name}' does not exist in type ${In}${Suggest<Name, Fields>}`]: never }
  : never

/** The type of a field given a value of another type: its one property names the field and the type it takes. */
type MustBe<Name, T> = Name extends string ? { [Message in `'${Name}' must be of type`]: T } : never

/** The fields of B its kind does not take. */
type UnknownFields<B, Kind> = Exclude<GivenKeys<B>, GivenKeys<Kind>>

/** Fields whose value is an object held to its own fields. */
interface Nested { penalty: [RateLimitPenalty, 'RateLimitPenalty'] }

/** Whether B gives a field Kind does not take, or a value of another type. */
type Flawed<B, Kind> = [UnknownFields<B, Kind> | WrongFields<B, Kind>] extends [never] ? false : true

/** The fields of B its kind takes, given a value of another type (or a nested object with a flaw of its own). */
type WrongFields<B, Kind> = {
  [K in GivenKeys<B> & GivenKeys<Kind>]: [B[K]] extends [Kind[K]]
    ? K extends keyof Nested ? Flawed<B[K], Nested[K][0]> extends true ? K : never : never
    : K
}[GivenKeys<B> & GivenKeys<Kind>]

/** What a wrong field must be: a nested object held to its fields, else the kind's type for it. */
type Corrected<B, Kind, K extends keyof B & keyof Kind> = K extends keyof Nested
  ? B[K] extends object ? ExactBlock<B[K], Nested[K]> : MustBe<K, Exclude<Kind[K], undefined>>
  : B[K] extends object ? Extract<Kind[K], object> : MustBe<K, Exclude<Kind[K], undefined>>

/** Keys B has as `undefined` only (its array neighbours' fields), absent: a value there is none of its kind's. */
type Absent<B, Kind> = [Exclude<keyof B, GivenKeys<B> | keyof Kind>] extends [never]
  ? unknown
  : { [K in Exclude<keyof B, GivenKeys<B> | keyof Kind>]?: undefined }

/** One block held to its kind: the kind itself when every field fits, else the kind with each wrong field's type naming it. */
type ExactBlock<B, Kind extends [object, string]> =
  Flawed<B, Kind[0]> extends false
    ? Kind[0] & Absent<B, Kind[0]>
    : Omit<Kind[0], UnknownFields<B, Kind[0]> | WrongFields<B, Kind[0]>> &
      { [K in UnknownFields<B, Kind[0]>]: DoesNotExist<K, Kind[1], GivenKeys<Kind[0]> & string> } &
      { [K in WrongFields<B, Kind[0]>]: Corrected<B, Kind[0], K> } &
      Absent<B, Kind[0]>

type CheckBlock<B> = B extends object ? ExactBlock<B, KindOf<B>> : AnyRateLimitBlock

type CheckRoute<B> = B extends false ? false
  : B extends readonly unknown[] ? Array<CheckBlock<B[number]>>
    : B extends object ? CheckBlock<B> : RouteRateLimit

/**
 * The type of `config.rateLimit` (of `config[Key]`, for a `configKey` of the
 * app's own): RouteRateLimit, held to each block's kind where the route's
 * config is a literal Fastify infers. `This` is the config it sits in: declare
 * it as `key?: CheckedRouteRateLimit<this, 'key'>` in FastifyContextConfig.
 */
export type CheckedRouteRateLimit<This, Key extends PropertyKey = 'rateLimit'> =
  Added<This> extends { [K in Key]?: infer B }
    ? 0 extends (1 & B) ? RouteRateLimit : unknown extends B ? RouteRateLimit : CheckRoute<B>
    : RouteRateLimit
