package cachefx

import (
	"context"
	"testing"
	"time"

	"github.com/redisfx/redisfx/internal/fxconfig"
	"github.com/redisfx/redisfx/internal/fxconfig/fxconfigtest"
	"github.com/redisfx/redisfx/internal/redistest"
)

// Every duration is at most fxconfig.MaxDuration, as in every module, so
// that the arithmetic on them cannot overflow (none was found here: a
// cache with every duration at the largest Duration stored, tagged,
// loaded and invalidated right).
func TestConfig_DurationsAboveTheLongestNameTheOption(t *testing.T) {
	const tooLong = fxconfig.MaxDuration + time.Nanosecond
	longest := Config{DefaultTTL: fxconfig.MaxDuration, LoadGuardTTL: fxconfig.MaxDuration, LoadWait: fxconfig.MaxDuration,
		StoreTimeout: fxconfig.MaxDuration, Local: LocalConfig{TTL: fxconfig.MaxDuration}}
	fxconfigtest.ExpectDurationBound(t, Config.Validate, map[string]Config{
		"DefaultTTL":   {DefaultTTL: tooLong},
		"LoadGuardTTL": {LoadGuardTTL: tooLong},
		"LoadWait":     {LoadWait: tooLong},
		"StoreTimeout": {StoreTimeout: tooLong},
		"Local.TTL":    {Local: LocalConfig{TTL: tooLong}},
	}, longest)
}

// A cache with every duration at the longest stores, tags, loads and
// invalidates as any other.
func TestLongestDurations_StoreLoadAndInvalidate(t *testing.T) {
	t.Parallel()
	c := newCache(t, client(t, redistest.Start(t)), Config{DefaultTTL: fxconfig.MaxDuration, LoadGuardTTL: fxconfig.MaxDuration,
		LoadWait: fxconfig.MaxDuration, StoreTimeout: fxconfig.MaxDuration, Local: LocalConfig{MaxEntries: 10, TTL: fxconfig.MaxDuration}})
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
