package ratelimitfx

import (
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// Both scripts read the time from Redis (TIME), so every process agrees on
// where a window begins and ends whatever its own clock says, and each
// check is one script on one key: Redis runs it atomically, which is what
// makes a limit exact across processes.

// fixedWindowScript counts in windows of ARGV[1] ms. A window begins with
// the first request after the previous window ended and is kept in the
// counter itself (a hash: s = its start in ms, n = requests counted), so
// the window is decided by the script's own clock reading, never by when
// Redis gets round to expiring the key. Returns {n, window start, now},
// times in ms.
//
// The key always has an expiry, at about the window's end: a relative one
// of what is left of the window (at least 1 ms). Not PEXPIREAT at the end:
// Redis compares that with its real clock, not with the script's reading,
// so in the window's last millisecond it could delete the counter the
// script was counting in (found by the checker).
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

// slidingLogScript keeps the times (ms) of allowed requests in a sorted
// set and allows a request only if fewer than ARGV[2] fall in the last
// ARGV[1] ms: (now - window, now]. ARGV[3] is a member unique to the
// check, so a retried script cannot log one request twice. Returns
// {requests in the window with this one, time of the oldest logged
// request, now, allowed 0/1}, times in ms.
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

// errReply is a script reply of the wrong shape.
var errReply = errors.New("ratelimitfx: unexpected script reply")

// decide turns a script reply into the Decision for rule.
func decide(alg Algorithm, rule Rule, res []int64) (Decision, error) {
	d := Decision{Limit: rule.Limit, Window: rule.Window}
	want := 3
	if alg == SlidingLog {
		want = 4
	}
	if len(res) != want {
		return d, errReply
	}
	// res[1] is the start of the window (fixed) or the oldest logged
	// request (sliding); either way capacity frees one window after it.
	d.Current, d.Reset = res[0], time.Duration(res[1]+windowMS(rule.Window)-res[2])*time.Millisecond
	d.Allowed = d.Current <= rule.Limit
	if alg == SlidingLog {
		d.Allowed = res[3] == 1
	}
	d.Remaining = max(rule.Limit-d.Current, 0)
	return d, nil
}
