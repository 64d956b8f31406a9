-- SPDX-License-Identifier: Apache-2.0
-- wrk script for scripts/demo-three-phase: counts responses by kind (the
-- gateway's X-Sluice-Result header and the status) in every thread, and
-- prints one summary line at the end:
--   WRK total=N backend=N degraded=N r429=N r5xx=N other=N sockerr=N
--       p50_ms=F p99_ms=F max_ms=F
local threads = {}

function setup(thread)
  table.insert(threads, thread)
end

function init(args)
  counts = { backend = 0, degraded = 0, r429 = 0, r5xx = 0, other = 0 }
end

function response(status, headers, body)
  local kind = headers["X-Sluice-Result"]
  if status >= 500 then
    counts.r5xx = counts.r5xx + 1
  elseif status == 429 then
    counts.r429 = counts.r429 + 1
  elseif status == 200 and kind == "degraded" then
    counts.degraded = counts.degraded + 1
  elseif status < 400 and kind == "backend" then
    counts.backend = counts.backend + 1
  else
    counts.other = counts.other + 1
  end
end

function done(summary, latency, requests)
  local total = { backend = 0, degraded = 0, r429 = 0, r5xx = 0, other = 0 }
  for _, thread in ipairs(threads) do
    local c = thread:get("counts")
    for k, v in pairs(c) do
      total[k] = total[k] + v
    end
  end
  local e = summary.errors
  local sockerr = e.connect + e.read + e.write + e.timeout
  io.write(string.format(
    "WRK total=%d backend=%d degraded=%d r429=%d r5xx=%d other=%d " ..
    "sockerr=%d p50_ms=%.3f p99_ms=%.3f max_ms=%.3f\n",
    summary.requests, total.backend, total.degraded, total.r429, total.r5xx,
    total.other, sockerr, latency:percentile(50) / 1000,
    latency:percentile(99) / 1000, latency.max / 1000))
end
