-- wrk script for benchmarks/registry_load.py: GET the paths listed in $WRK_PATHS, each request a
-- path picked at random ($WRK_ORDER=random, the default: a cold spread over every slug) or in turn
-- from each thread's own offset ($WRK_ORDER=turn: every path of a long list once), and print one
-- JSON line of results at the end.
local paths = {}
for line in io.lines(os.getenv("WRK_PATHS")) do paths[#paths + 1] = line end
local random = os.getenv("WRK_ORDER") ~= "turn"
local i = 0
local counter = 0

setup = function(thread)
  thread:set("offset", counter * math.floor(#paths / 2))
  thread:set("seed", 7919 * (counter + 1))
  counter = counter + 1
end

init = function(args)
  math.randomseed(seed or 1)
end

request = function()
  i = i + 1
  if random then
    return wrk.format("GET", paths[math.random(#paths)])
  end
  return wrk.format("GET", paths[((i + (offset or 0)) % #paths) + 1])
end

done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    '{"requests": %d, "duration_us": %d, "p50_us": %d, "p90_us": %d, "p99_us": %d, "max_us": %d, ' ..
    '"socket_errors": %d, "non_2xx": %d}\n',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(90),
    latency:percentile(99), latency.max, e.connect + e.read + e.write + e.timeout, e.status))
end
