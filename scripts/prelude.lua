-- The prelude of every script and of the Functions library: the library
-- functions every decision calls, bound as locals by the builder
-- (lib/store/redis/scripts.ts) right after this fragment, from the names
-- declared below: a global lookup is two table reads per call.
--@binds call pcallRedis tonumber floor ceil min format find sub byte match packNumbers unpackNumbers
--@provides libraryFunctions

-- packNumbers, unpackNumbers: state format 2 (the uppercase key suffixes), an
-- algorithm's numbers packed as little-endian doubles, exact below 2^53.
-- Decimal text would cost more than the algorithm: three tonumber (strtod) to read
-- it, string.format to write it. A stored value of another length is not ours
-- and reads as absent.
-- A Redis Functions library sees none of these while it loads: it declares the
-- locals and binds them on its first call (lib/store/redis/library.ts).
-- The values in the order of the --@binds line.
local function libraryFunctions ()
  return redis.call, redis.pcall, tonumber, math.floor, math.ceil, math.min, string.format, string.find, string.sub, string.byte, string.match, struct.pack, struct.unpack
end

-- Integer division is floor(a / b) (ceil(a / b) rounding up), exact as it is
-- for integers with |a| below 2^53 and b >= 1: a / b is q + r/b, at least 1/b
-- from the next integer, and rounding moves it by at most |a / b| * 2^-53,
-- which is less than 1/b while |a| < 2^53. Written inline: a Lua function
-- call around it would cost more than the division (benchmarks/instructions.ts).
