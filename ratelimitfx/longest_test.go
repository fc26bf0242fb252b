package ratelimitfx

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisfx/redisfx/internal/redistest"
)

// resetWithCounterAhead checks once against a counter whose window began
// (the oldest request logged, sliding) one second after Redis's clock (written by a Redis whose clock was
// ahead, before a failover), and returns the Decision's Reset.
func resetWithCounterAhead(t *testing.T, l *Limiter, rule Rule) (time.Duration, error) {
	t.Helper()
	ctx := context.Background()
	now, err := l.rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	key, ahead := l.counterKey(l.withDefaults(rule), "k"), now.UnixMilli()+1000
	if l.cfg.Algorithm == SlidingLog {
		err = l.rdb.ZAdd(ctx, key, redis.Z{Score: float64(ahead), Member: "ahead"}).Err()
	} else {
		err = l.rdb.HSet(ctx, key, "s", ahead, "n", 0).Err()
	}
	if err != nil {
		t.Fatal(err)
	}
	d, err := l.Check(ctx, rule, "k")
	return d.Reset, err
}

// A window near the largest Duration overflowed the Decision's Reset
// (window + start − now, in ms, times 1ms) as soon as a counter's window
// began after Redis's clock (a failover to a node whose clock is behind):
// Reset came out negative. It saturates now.
func TestLongestWindow_ResetDoesNotWrap(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	const longest = time.Duration(math.MaxInt64) / time.Millisecond * time.Millisecond
	for _, alg := range []Algorithm{FixedWindow, SlidingLog} {
		l := newLimiter(t, srv, Config{Window: longest, StoreTimeout: math.MaxInt64, Algorithm: alg})
		reset, err := resetWithCounterAhead(t, l, Rule{Name: "longest", Limit: 1})
		if err != nil || reset < longest-2*time.Second {
			t.Errorf("%s, the longest window: Reset %v, %v; want about the window", alg, reset, err)
		}
	}
}
