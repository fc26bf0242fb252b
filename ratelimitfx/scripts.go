package ratelimitfx

import (
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisfx/redisfx/internal/durations"
)

// Both scripts read Redis's clock (TIME), so every process agrees on the
// windows, and each is one script on one key, run atomically.

// fixedWindowScript counts in windows of ARGV[1] ms, each beginning with
// the first request after the last ended; the window is kept in the hash
// (s = start ms, n = count) so the script's clock, not Redis's expiry,
// decides it. The expiry is relative (what is left of the window): PEXPIREAT
// compares with the real clock and could delete the counter in the
// window's last ms. Returns {n, start, now}.
var fixedWindowScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local window = tonumber(ARGV[1])
local start = tonumber(redis.call('HGET', KEYS[1], 's'))
if not start or now >= start + window then
  start = now
  redis.call('HSET', KEYS[1], 's', start, 'n', 0)
end
local n = redis.call('HINCRBY', KEYS[1], 'n', 1)
redis.call('PEXPIRE', KEYS[1], start + window - now)
return {n, start, now}
`)

// slidingLogScript allows a request only if fewer than ARGV[2] allowed
// ones (a sorted set of times) fall in (now - ARGV[1] ms, now]; ARGV[3] is
// unique per check, so a retried script logs nothing twice. Returns {count
// with this one, oldest logged time, now, allowed}.
var slidingLogScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local window = tonumber(ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
local n = redis.call('ZCARD', KEYS[1])
local allowed = 0
if n < tonumber(ARGV[2]) then
  redis.call('ZADD', KEYS[1], now, ARGV[3])
  allowed = 1
end
redis.call('PEXPIRE', KEYS[1], window)
local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
local first = now
if oldest[2] then first = tonumber(oldest[2]) end
return {n + 1, first, now, allowed}
`)

func decide(alg Algorithm, rule Rule, res []int64) Decision {
	d := Decision{Limit: rule.Limit, Window: rule.Window}
	// res[1] is the start of the window (fixed) or the oldest logged
	// request (sliding); either way capacity frees one window after it.
	d.Current, d.Reset = res[0], durations.Mul(time.Millisecond, max(res[1]+rule.Window.Milliseconds()-res[2], 0))
	d.Allowed = d.Current <= rule.Limit
	if alg == SlidingLog {
		d.Allowed = res[3] == 1
	}
	d.Remaining = max(rule.Limit-d.Current, 0)
	return d
}
