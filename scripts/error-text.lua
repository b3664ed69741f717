-- A failed decision's reply text, whatever redis.call raised (a table with
-- `err`, or a Lua error): the batch script and a lone decision's script answer
-- 0 and this text for the decision alone (lib/store/redis/scripts.ts).
local function errorText (e)
  if type(e) == 'table' and e.err ~= nil then return e.err end
  return tostring(e)
end
