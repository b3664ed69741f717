-- Penalties (escalation for repeat offenders), decided in the batch driver
-- around the algorithm. A block with a penalty spec 'after:forMs:backoff:maxMs'
-- has a second key (the decision's penalty keys follow its block keys in
-- KEYS) holding one string "until:offences:refusals:windowIndex":
--
--   - until > now: the identity is penalized; the decision is refused without
--     running the algorithm for that block (the other blocks are only peeked),
--     allowed = 2, retryAfterMs = resetMs = until - now.
--   - a charge refused by that block counts one refusal in the block's
--     current window (window index = floor(now / windowMs)); the `after`-th
--     refusal of one window starts a penalty: offences + 1, lasting forMs the
--     first time and `backoff` times longer at each further offence (repeated
--     multiplication, as the memory store does), never more than maxMs; the
--     refusal count starts again.
--   - offences are forgotten once a caller stays quiet for as long as its
--     last penalty after it ended (now >= until + last); the key lives
--     max(windowMs, until - now + the last penalty), so it vanishes then too.
--
-- Shadow blocks and peeks never count refusals; refunds ignore penalties.
--@requires call match tonumber floor min format
--@provides penaltyRead penaltyRefused
local function penaltySpec (spec)
  local a, f, b, m = match(spec, '^(%d+):(%d+):([%d%.]+):(%d+)$')
  return tonumber(a), tonumber(f), tonumber(b), tonumber(m)
end
local function penaltyRead (key)
  local stored = call('GET', key)
  if not stored then return 0, 0, 0, -1 end
  local u, o, r, x = match(stored, '^(%-?%d+):(%d+):(%d+):(%-?%d+)$')
  if not u then return 0, 0, 0, -1 end
  return tonumber(u), tonumber(o), tonumber(r), tonumber(x)
end
-- Counts one refusal; returns the penalty's end when this refusal starts one, else nil.
local function penaltyRefused (key, spec, w, now)
  local after, forMs, backoff, maxMs = penaltySpec(spec)
  local untilMs, offences, refusals, idx = penaltyRead(key)
  local current = floor(now / w)
  if idx ~= current then refusals = 0 end
  refusals = refusals + 1
  local started = nil
  local last = 0
  if offences > 0 then
    last = forMs
    for _ = 2, offences do last = min(maxMs, last * backoff) end
    last = floor(last)
    -- quiet for as long as the last penalty after it ended: the offences are forgotten
    if now >= untilMs + last then
      offences = 0
      last = 0
    end
  end
  if refusals >= after then
    offences = offences + 1
    local d = forMs
    for _ = 2, offences do d = min(maxMs, d * backoff) end
    d = floor(min(maxMs, d))
    untilMs = now + d
    last = d
    refusals = 0
    started = untilMs
  end
  local ttl = w
  if untilMs - now + last > ttl then ttl = untilMs - now + last end
  call('SET', key, format('%d:%d:%d:%d', untilMs, offences, refusals, current), 'PX', format('%d', ttl))
  return started
end
