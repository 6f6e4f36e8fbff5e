-- GETs of the first HOT keys (cached by the warm-up before), paced when
-- DELAY_MS is set: each connection waits that long before each request, so
-- that 16 connections send about the rate of the PUTs.
local hot = tonumber(os.getenv("HOT") or "10000")
local pause = tonumber(os.getenv("DELAY_MS") or "0")
math.randomseed(os.time())
request = function()
  return wrk.format("GET", "/v1/kv/widgets/" .. math.random(1, hot))
end
if pause > 0 then
  delay = function() return pause end
end
