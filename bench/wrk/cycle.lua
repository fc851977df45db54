-- bench/wrk/cycle.lua: acquire -> release lease cycles against mutexd, for wrk.
--
-- Run with as many threads as connections (bench/wrk.sh does): each wrk thread has its own
-- Lua state and then one connection, so each connection cycles on its own key, one request
-- at a time. request() writes the acquire, or the release of the lease the last acquire got;
-- response() keeps the lease_id and counts a cycle for every release answered 200.
--
--   wrk -t64 -c64 -d10s -s bench/wrk/cycle.lua http://127.0.0.1:PORT -- PREFIX [TTL_MS]

local threads = {}
local next_id = 0

function setup(thread)
    thread:set("id", next_id)
    next_id = next_id + 1
    table.insert(threads, thread)
end

function init(args)
    local prefix = args[1] or "wrk"
    ttl = tonumber(args[2] or "15000")
    key = prefix .. "-" .. id
    lease = nil
    cycles = 0
    failures = 0
    headers = { ["Content-Type"] = "application/json" }
end

function request()
    if lease then
        return wrk.format("POST", "/v1/resources/" .. key .. "/release", headers,
            '{"lease_id":"' .. lease .. '"}')
    end
    return wrk.format("POST", "/v1/resources/" .. key .. "/acquire", headers,
        '{"owner":"' .. key .. '","ttl_ms":' .. ttl .. '}')
end

function response(status, hdrs, body)
    if lease then
        if status == 200 then
            cycles = cycles + 1
        else
            failures = failures + 1
        end
        lease = nil
    elseif status == 200 then
        lease = body:match('"lease_id"%s*:%s*"([^"]+)"')
        if not lease then
            failures = failures + 1
        end
    else
        failures = failures + 1
    end
end

function done(summary, latency, requests)
    local total, failed = 0, 0
    for _, t in ipairs(threads) do
        total = total + t:get("cycles")
        failed = failed + t:get("failures")
    end
    local secs = summary.duration / 1e6
    io.write(string.format("wrk_cycles %d\nwrk_failures %d\nwrk_seconds %.3f\n", total, failed, secs))
    io.write(string.format("wrk_cycles_per_s %.1f\nwrk_requests_per_s %.1f\n", total / secs,
        summary.requests / secs))
    io.write(string.format("wrk_request_p50_ms %.3f\nwrk_request_p99_ms %.3f\n",
        latency:percentile(50) / 1000, latency:percentile(99) / 1000))
end
