-- wrk script of bench/replication_cost.py's reads: GET of a customer's transactions from the read models
-- (GET /transactions/custodian?customerCode=<customer>&pageSize=<n>), cycling over the benchmark's customers.
--
--   wrk -t1 -c64 -d10s --latency -H "Authorization: Bearer ..." -s bench/wrk_get.lua \
--       http://127.0.0.1:8000 -- <customer prefix> <customers> <page size>
--
-- The header api_version is set here. response() counts the responses per status; done() prints the same
-- machine-readable "BENCH <name> <value>" lines as bench/wrk_buy.lua (latencies in microseconds), which
-- bench/load_support.run_wrk parses, and the start of the first refused response's body.

local threads = {}

function setup(thread)
   thread:set("thread_id", #threads + 1)
   table.insert(threads, thread)
end

function init(args)
   customer_prefix = args[1] or "bench-"
   customers = tonumber(args[2] or "1")
   page_size = args[3] or "20"
   sequence = 0
   offset = (thread_id - 1) * 7919  -- threads start at different customers
   statuses = {}
   first_refusal = ""
   wrk.method = "GET"
   wrk.headers["api_version"] = "1.2"
end

function request()
   sequence = sequence + 1
   local customer = customer_prefix .. ((offset + sequence) % customers)
   local path = "/transactions/custodian?customerCode=" .. customer .. "&pageSize=" .. page_size
   return wrk.format("GET", path)
end

function response(status, headers, body)
   local key = tostring(status)
   statuses[key] = (statuses[key] or 0) + 1
   if (status < 200 or status > 299) and first_refusal == "" then
      first_refusal = key .. " " .. string.sub(body or "", 1, 300)
   end
end

function done(summary, latency, requests)
   local counts = {}
   local refusal = ""
   for _, thread in ipairs(threads) do
      for status, n in pairs(thread:get("statuses")) do
         counts[status] = (counts[status] or 0) + n
      end
      if refusal == "" then
         refusal = thread:get("first_refusal")
      end
   end
   for status, n in pairs(counts) do
      io.write(string.format("BENCH status_%s %d\n", status, n))
   end
   io.write(string.format("BENCH duration_us %d\n", summary.duration))
   io.write(string.format("BENCH requests %d\n", summary.requests))
   for _, kind in ipairs({ "connect", "read", "write", "timeout" }) do
      io.write(string.format("BENCH socket_%s %d\n", kind, summary.errors[kind]))
   end
   for _, p in ipairs({ 50, 90, 99, 99.9 }) do
      io.write(string.format("BENCH p%s_us %d\n", p, latency:percentile(p)))
   end
   io.write(string.format("BENCH max_us %d\n", latency.max))
   if refusal ~= "" then
      io.write("BENCH_REFUSAL " .. string.gsub(refusal, "\n", " ") .. "\n")
   end
end
