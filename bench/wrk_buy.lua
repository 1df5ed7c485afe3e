-- wrk script of bench/load.py: POSTs a buy that is committed at once (POST /brokerbuy without "stage"),
-- cycling over the benchmark's customers, each request with a unique Idempotency-Key.
--
--   wrk -t1 -c64 -d15s --latency -H "Authorization: Bearer ..." -s bench/wrk_buy.lua \
--       http://127.0.0.1:8000/brokerbuy -- <customer prefix> <customers> <key prefix> <fiat value> <address>
--       [keys|no-keys]
--
-- With "no-keys" the requests carry no Idempotency-Key (each buy then gets a code of its own): what a key
-- costs a buy is the difference.
-- The headers api_version and Content-Type are set here. response() counts the responses per status;
-- done() prints machine-readable "BENCH <name> <value>" lines (latencies in microseconds), which
-- bench/load.py parses, and the start of the first refused response's body.

local threads = {}

function setup(thread)
   thread:set("thread_id", #threads + 1)
   table.insert(threads, thread)
end

function init(args)
   customer_prefix = args[1] or "bench-"
   customers = tonumber(args[2] or "1")
   key_prefix = (args[3] or "load") .. "-t" .. thread_id .. "-"
   fiat_value = args[4] or "20"
   address = args[5] or "bc1qw508d6qejxtdg4y5r3zarvary0c5xw7kv8f3t4"
   keyed = args[6] ~= "no-keys"
   sequence = 0
   offset = (thread_id - 1) * 7919  -- threads start at different customers
   statuses = {}
   first_refusal = ""
   wrk.method = "POST"
   wrk.headers["api_version"] = "1.2"
   wrk.headers["Content-Type"] = "application/json"
end

function request()
   sequence = sequence + 1
   local customer = customer_prefix .. ((offset + sequence) % customers)
   local body = '{"customerCode":"' .. customer .. '","currencyCode":"EUR","cryptoCode":"BTC","fiatValue":'
      .. fiat_value .. ',"destinationAddress":"' .. address .. '","paymentMethodCode":"BANK_EUR_BUY"}'
   if keyed then
      wrk.headers["Idempotency-Key"] = key_prefix .. sequence
   end
   return wrk.format(nil, nil, nil, body)
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
