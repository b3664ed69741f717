-- A block spec as one argument, 'algorithm|limit|windowMs|burst|shadow|penalty'
-- (protocol.ts specText; shadow '1' or '', penalty 'after:forMs:backoff:maxMs'
-- or ''), read once: a Redis Functions library keeps what it parsed between
-- calls (a script's cache starts empty on every call).
-- At most SPEC_CACHE_MAX texts are kept (limits given per request vary).
-- Returns { algorithm number, limit, windowMs, burst, shadow (boolean), penalty }.
--@requires match tonumber
--@provides blockSpec
local SPEC_CACHE_MAX = 1024
local specCache, specCount = {}, 0
local function blockSpec (text)
  local spec = specCache[text]
  if spec ~= nil then return spec end
  local n, limit, w, burst, shadow, penalty = match(text, '^(%d+)|(%d+)|(%d+)|(%d+)|(1?)|(.*)$')
  if n == nil then error('malformed block spec: ' .. text) end
  spec = { tonumber(n), tonumber(limit), tonumber(w), tonumber(burst), shadow == '1', penalty }
  if specCount >= SPEC_CACHE_MAX then specCache, specCount = {}, 0 end
  specCache[text], specCount = spec, specCount + 1
  return spec
end
