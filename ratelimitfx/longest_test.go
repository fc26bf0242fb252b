package ratelimitfx

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisfx/redisfx"
	"github.com/redisfx/redisfx/internal/fxconfig"
	"github.com/redisfx/redisfx/internal/fxconfig/fxconfigtest"
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
// Reset came out negative, -292 years. Windows are at most 100 years, a
// longer one is refused naming the field; at 100 years Reset is right.
func TestWindowAboveTheLongest_RefusedAndResetDoesNotWrap(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	const tooLong = time.Duration(1<<63-1) / time.Millisecond * time.Millisecond
	for _, w := range []time.Duration{fxconfig.MaxDuration + time.Millisecond, tooLong} {
		if err := (Config{Window: w}).Validate(); err == nil || !strings.Contains(err.Error(), "Config.Window") {
			t.Errorf("Config.Window %v: %v, want an error naming Config.Window", w, err)
		}
		l := newLimiter(t, srv, Config{})
		_, err := l.Check(context.Background(), Rule{Name: "huge", Window: w}, "k")
		var cerr *redisfx.ConfigError
		if !errors.As(err, &cerr) || cerr.Field != "Rule.Window" {
			t.Errorf("Rule.Window %v: %v, want a ConfigError naming Rule.Window", w, err)
		}
	}
	for _, alg := range []Algorithm{FixedWindow, SlidingLog} {
		l := newLimiter(t, srv, Config{Window: fxconfig.MaxDuration, Algorithm: alg})
		reset, err := resetWithCounterAhead(t, l, Rule{Name: "longest", Limit: 1})
		if err != nil || reset <= 0 || reset > fxconfig.MaxDuration+2*time.Second {
			t.Errorf("%s, window of 100 years: Reset %v, %v; want about 100 years", alg, reset, err)
		}
	}
}

// Every duration is at most fxconfig.MaxDuration.
func TestConfig_DurationsAboveTheLongestNameTheOption(t *testing.T) {
	const tooLong = fxconfig.MaxDuration + time.Millisecond // Window is whole milliseconds
	longest := Config{Window: fxconfig.MaxDuration, StoreTimeout: fxconfig.MaxDuration}
	if err := (Config{StoreTimeout: fxconfig.MaxDuration + time.Nanosecond}).Validate(); err == nil {
		t.Errorf("StoreTimeout one nanosecond above the longest taken")
	}
	fxconfigtest.ExpectDurationBound(t, Config.Validate, map[string]Config{
		"Window":       {Window: tooLong},
		"StoreTimeout": {StoreTimeout: tooLong},
	}, longest)
}
