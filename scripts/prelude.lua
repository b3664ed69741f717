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
