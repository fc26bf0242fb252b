package ratelimitfx

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisfx/redisfx/internal/redistest"
)

// fillWindowScript sets a fixed-window counter at its limit of 1, in a
// window that ends one millisecond after Redis's current millisecond.
var fillWindowScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSET', KEYS[1], 's', now + 1 - tonumber(ARGV[1]), 'n', 1)
redis.call('PEXPIREAT', KEYS[1], now + 1)
`)

// Found by the checker: a check in the last millisecond of a fixed window
// read the time, then set the window's expiry at its end — which Redis
// compares with its real clock, not the script's reading. When the clock
// ticked in between, the expiry deleted the counter it was counting in:
// the check was allowed as the window's first (one more than the limit)
// and left a counter without an expiry. A check on a full window is
// refused or opens a whole new window; the counter always expires.
func TestFixedWindow_LastMillisecondNeverRecountsTheWindow(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	l := newLimiter(t, srv, Config{})
	rdb := srv.Client()
	ctx := context.Background()
	rule := l.withDefaults(Rule{Limit: 1, Window: time.Second})
	hits := 0
	const attempts = 4000 // a hit needs the clock to tick within the script: ~1 in 300 on the old script
	for i := range attempts {
		key := fmt.Sprint("edge-", i)
		counter := l.counterKey(rule, key)
		if err := fillWindowScript.Run(ctx, rdb, []string{counter}, rule.Window.Milliseconds()).Err(); err != nil && !errors.Is(err, redis.Nil) {
			t.Fatal(err)
		}
		d, err := l.Check(ctx, rule, key)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed && d.Reset != rule.Window {
			hits++
			t.Errorf("attempt %d: allowed with %v left of the full window (a recount of it, not a new one)", i, d.Reset)
		}
		if ttl := rdb.PTTL(ctx, counter).Val(); ttl == -1 {
			t.Errorf("attempt %d: the counter has no expiry", i)
		}
		if hits >= 3 {
			t.Fatalf("stopped after %d of %d attempts", i+1, attempts)
		}
	}
}
