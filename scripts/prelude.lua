-- The prelude of every script lib/store/redis/scripts.ts assembles from this
-- folder: the library functions, exact integer division, the clock and the
-- state format, for the algorithms and drivers.

-- The library functions every decision calls, as locals: a global lookup is
-- two table reads per call (measured with benchmarks/instructions.ts).
-- packNumbers, unpackNumbers: state format 2 (the uppercase key suffixes), an
-- algorithm's numbers packed as little-endian doubles, exact below 2^53.
-- Decimal text cost more than the algorithm: three tonumber (strtod) to read
-- it, string.format to write it. A stored value of another length is not ours
-- and reads as absent.
-- A Redis Functions library sees none of these while it loads: it declares the
-- locals and binds them on its first call (lib/store/redis/library.ts).
local function libraryFunctions ()
  return redis.call, redis.pcall, tonumber, math.floor, math.ceil, math.min, string.format, string.find, string.sub, string.match, struct.pack, struct.unpack
end
local call, pcallRedis, tonumber, floor, ceil, min, format, find, sub, match, packNumbers, unpackNumbers = libraryFunctions()

-- Integer division is floor(a / b) (ceil(a / b) rounding up), exact as it is
-- for integers with |a| below 2^53 and b >= 1: a / b is q + r/b, at least 1/b
-- from the next integer, and rounding moves it by at most |a / b| * 2^-53,
-- which is less than 1/b while |a| < 2^53. Written inline: a Lua function
-- around it cost 3 % of a decision (benchmarks/instructions.ts).

-- now in ms: the argument (the injected clock), or Redis TIME when it is empty
local function nowMs (arg)
  if arg == nil or arg == '' then
    local t = call('TIME')
    return tonumber(t[1]) * 1000 + floor(tonumber(t[2]) / 1000)
  end
  return floor(tonumber(arg))
end
