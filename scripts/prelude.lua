-- The prelude of every script lib/store/redis/scripts.ts assembles from this
-- folder: exact integer division and the clock, for the algorithms and drivers.

-- floor(a / b) for integers with |a| and b below 2^53, exact whatever the rounding of a / b
local function idiv (a, b)
  local q = math.floor(a / b)
  if q * b > a then
    q = q - 1
  elseif (q + 1) * b <= a then
    q = q + 1
  end
  return q
end

-- ceil(a / b), as exact
local function cdiv (a, b)
  local q = idiv(a, b)
  if q * b < a then q = q + 1 end
  return q
end

-- now in ms: the argument (the injected clock), or Redis TIME when it is empty
local function nowMs (arg)
  if arg == nil or arg == '' then
    local t = redis.call('TIME')
    return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return math.floor(tonumber(arg))
end

-- One algorithm's ARGV as numbers: limit, windowMs, burst, cost, now, and whether it is a dry run
-- ('1': decide and write nothing); ARGV[6] == '2' (refund) is the algorithm's own to read.
local function blockArgs (ARGV)
  return tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), nowMs(ARGV[5]), ARGV[6] == '1'
end

-- Redis TIME in ms as a script argument (the drivers read it once for every block)
local function redisNow ()
  return string.format('%d', nowMs(''))
end
