package cachefx

import (
	"context"
	"math"
	"testing"

	"github.com/redisfx/redisfx/internal/redistest"
)

// A cache with every duration at the largest Duration stores, tags, loads and
// invalidates as any other.
func TestLongestDurations_StoreLoadAndInvalidate(t *testing.T) {
	t.Parallel()
	c := newCache(t, client(t, redistest.Start(t)), Config{DefaultTTL: math.MaxInt64, LoadGuardTTL: math.MaxInt64,
		LoadWait: math.MaxInt64, StoreTimeout: math.MaxInt64, Local: LocalConfig{MaxEntries: 10, TTL: math.MaxInt64}})
	ctx := context.Background()
	if err := c.Set(ctx, "k", []byte("v"), 0, "t"); err != nil {
		t.Fatal(err)
	}
	load := func(v string) Loader { return func(context.Context) ([]byte, error) { return []byte(v), nil } }
	if v, err := c.GetOrLoad(ctx, "l", 0, load("first"), "t"); err != nil || string(v) != "first" {
		t.Fatalf("first load: %q, %v", v, err)
	}
	if v, err := c.GetOrLoad(ctx, "l", 0, load("second"), "t"); err != nil || string(v) != "first" {
		t.Fatalf("second load: %q, %v; want the stored value", v, err)
	}
	if n, err := c.InvalidateByTags(ctx, "t"); err != nil || n != 2 {
		t.Fatalf("InvalidateByTags: %d, %v; want 2", n, err)
	}
	if _, found, err := c.Get(ctx, "k"); found || err != nil {
		t.Fatalf("after invalidation: found=%v, %v", found, err)
	}
	if v, err := c.GetOrLoad(ctx, "l", 0, load("third"), "t"); err != nil || string(v) != "third" {
		t.Fatalf("load after invalidation: %q, %v", v, err)
	}
}
