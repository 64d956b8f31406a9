-- SPDX-License-Identifier: Apache-2.0
-- wrk script for scripts/demo-leases: each request names a random tenant
-- (X-Tenant: t-<1..1000000>), so that almost every key is new and cold.
math.randomseed(os.time())

function request()
  return wrk.format(nil, nil,
                    { ["X-Tenant"] = "t-" .. math.random(1, 1000000) })
end
