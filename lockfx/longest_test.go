package lockfx

import (
	"context"
	"errors"
	"math"
	"testing"
)

// The longest TTL works: the marker's lifetime (TTL + 1 minute) saturates
// instead of overflowing into a negative expiry, so a second owner is told
// the lock is held, and the holder releases it.
func TestLongestTTL_ContendedAcquireIsNotAcquired(t *testing.T) {
	t.Parallel()
	l := newLocker(t, Config{TTL: math.MaxInt64, Backoff: math.MaxInt64, MaxBackoff: math.MaxInt64, WaitTimeout: math.MaxInt64, Attempts: 1})
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
