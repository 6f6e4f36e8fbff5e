-- PUTs of random widgets of the bench's table (keys 1..ROWS), a body of
-- about 200 bytes each; put-cpu.sh sets ROWS.
local rows = tonumber(os.getenv("ROWS") or "100000")
math.randomseed(os.time())
request = function()
  local k = math.random(1, rows)
  local body = '{"widget": {"id": "' .. k .. '", "name": "widget", "tags": ["a", "b"], "price": 12.5, "stock": 3, ' ..
    '"description": "a widget of moderate size that the write path of the service stores end to end"}}'
  return wrk.format("PUT", "/v1/kv/widgets/" .. k, {["Content-Type"] = "application/json"}, body)
end
