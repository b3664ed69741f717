-- The clock every call reads once.
--@requires call tonumber floor
--@provides nowMs

-- now in ms: the argument (the injected clock), or Redis TIME when it is empty
local function nowMs (arg)
  if arg == nil or arg == '' then
    local t = call('TIME')
    return tonumber(t[1]) * 1000 + floor(tonumber(t[2]) / 1000)
  end
  return floor(tonumber(arg))
end
