-- The wrk side of `npm run bench -- --load wrk` (benchmarks/wrk.ts runs it).
-- Sends the harness's client keys: one X-Forwarded-For address per request,
-- rotating through the file the harness wrote from clientIp(), each thread
-- starting at its own offset; requests are formatted once, in init.
-- Arguments (after --): <address file> <"codes" to count status codes, else "">.
-- done() prints one line, WRK_JSON {...}, that the harness parses.

local requests = {}
local cursor = 0
local threads = {}
local counter = 0
codes = {}

function setup (thread)
  thread:set('id', counter)
  counter = counter + 1
  table.insert(threads, thread)
end

function init (args)
  for ip in io.lines(args[1]) do
    requests[#requests + 1] = wrk.format('GET', '/', { ['X-Forwarded-For'] = ip })
  end
  cursor = (id * 7919) % #requests
  -- Counting status codes makes wrk parse every response's headers: only where the counts matter.
  if args[2] == 'codes' then
    response = function (status)
      codes[status] = (codes[status] or 0) + 1
    end
  end
end

function request ()
  cursor = cursor + 1
  if cursor > #requests then cursor = 1 end
  return requests[cursor]
end

function done (summary, latency)
  local total = {}
  for _, thread in ipairs(threads) do
    for status, n in pairs(thread:get('codes') or {}) do
      total[status] = (total[status] or 0) + n
    end
  end
  local parts = {}
  for status, n in pairs(total) do
    parts[#parts + 1] = string.format('"%d":%d', status, n)
  end
  local e = summary.errors
  io.write(string.format(
    'WRK_JSON {"requests":%.0f,"durationUs":%.0f,"connectErrors":%.0f,"readErrors":%.0f,"writeErrors":%.0f,"statusErrors":%.0f,"timeouts":%.0f,"p50Us":%.0f,"p99Us":%.0f,"codes":{%s}}\n',
    summary.requests, summary.duration, e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(99), table.concat(parts, ',')))
end
