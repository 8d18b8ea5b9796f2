--[[
  slot-probe: asks, once per lock client, whether the endpoint keeps every request in one hash slot. Sent
  before the first script call of a client off a Cluster whose key prefix has no hash tag (src/redis/scripts.ts):
  a proxy-sharded endpoint, or a cluster-mode server reached by a standalone client, refuses this call with
  CROSSSLOT before running it, as it would refuse the release of such a client's lock after its acquire had
  run. A plain server runs it.

  KEYS[1] first   "<prefix>flowlock:slot-probe:{0}", never read or written
  KEYS[2] second  "<prefix>flowlock:slot-probe:{1}", never read or written (another slot than KEYS[1])

  ARGV    none

  Returns
    0

  Side effects
    none
]]
local first = KEYS[1]
local second = KEYS[2]

-- Neither key is touched: a refusal comes before the script runs, and a server that runs it needs nothing.
return 0
