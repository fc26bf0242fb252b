package lockfx

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/redisfx/redisfx/internal/fxconfig"
	"github.com/redisfx/redisfx/internal/fxconfig/fxconfigtest"
)

// The longest TTL taken (fxconfig.MaxDuration) still works: a second
// owner is told the lock is held, and the holder releases it. One beyond
// is refused, naming the field: a TTL of 292 years overflowed the marker's
// lifetime (TTL + 1 minute) into a negative one, and every acquire of a
// held lock failed with Redis's "invalid expire time" instead of
// ErrNotAcquired.
func TestLongestTTL_ContendedAcquireIsNotAcquired(t *testing.T) {
	t.Parallel()
	for _, ttl := range []time.Duration{fxconfig.MaxDuration + time.Nanosecond, math.MaxInt64 - 30*time.Second} {
		if err := (Config{TTL: ttl}).Validate(); err == nil || !strings.Contains(err.Error(), "Config.TTL") {
			t.Fatalf("TTL %v: %v, want an error naming Config.TTL", ttl, err)
		}
	}
	l := newLocker(t, Config{TTL: fxconfig.MaxDuration, Attempts: 1})
	ctx := context.Background()
	held, err := l.Acquire(ctx, "longest")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Acquire(ctx, "longest"); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("second acquire: %v, want ErrNotAcquired", err)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatalf("release: %v", err)
	}
	again, err := l.Acquire(ctx, "longest")
	if err != nil {
		t.Fatalf("acquire after release: %v", err)
	}
	_ = again.Release(ctx)
}

// Every duration is at most fxconfig.MaxDuration: the arithmetic on them
// (TTL plus the marker's minute, Backoff doubled) must not overflow.
func TestConfig_DurationsAboveTheLongestNameTheOption(t *testing.T) {
	const tooLong = fxconfig.MaxDuration + time.Nanosecond
	longest := Config{TTL: fxconfig.MaxDuration, Backoff: fxconfig.MaxDuration, MaxBackoff: fxconfig.MaxDuration, WaitTimeout: fxconfig.MaxDuration}
	fxconfigtest.ExpectDurationBound(t, Config.Validate, map[string]Config{
		"TTL":         {TTL: tooLong},
		"Backoff":     {Backoff: tooLong},
		"MaxBackoff":  {MaxBackoff: tooLong},
		"WaitTimeout": {WaitTimeout: tooLong},
	}, longest)
}
