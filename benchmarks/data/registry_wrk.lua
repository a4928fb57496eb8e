-- wrk script for benchmarks/registry_load.py: GET the paths listed in $WRK_PATHS in turn
-- (each thread starts at its own offset) and print one JSON line of results at the end.
local paths = {}
for line in io.lines(os.getenv("WRK_PATHS")) do paths[#paths + 1] = line end
local i = 0
local counter = 0

setup = function(thread)
  thread:set("offset", counter * 9973)
  counter = counter + 1
end

request = function()
  i = i + 1
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
