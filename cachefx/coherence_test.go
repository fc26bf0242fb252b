package cachefx

import (
	"context"
	"testing"
	"time"

	"github.com/redisfx/redisfx/internal/redistest"
)

// A Get in the window of a Delete (after the first layer was dropped, before
// Redis deleted the value) read the old value from Redis and kept it in the
// first layer; the process's own invalidation message is skipped, so it
// stayed there until Local.TTL. The same for InvalidateByTags. The gate
// holds the DEL and runs the Get exactly in that window.
func TestLocalLayer_NoStaleReadAfterDeleteOrInvalidate(t *testing.T) {
	t.Parallel()
	for name, write := range map[string]func(context.Context, *Cache) error{
		"Delete":           func(ctx context.Context, c *Cache) error { _, err := c.Delete(ctx, "k"); return err },
		"InvalidateByTags": func(ctx context.Context, c *Cache) error { _, err := c.InvalidateByTags(ctx, "t"); return err },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			rdb := client(t, redistest.Start(t))
			g := newGate(false, commandIs("del"))
			rdb.AddHook(g)
			c := newCache(t, rdb, Config{Local: LocalConfig{MaxEntries: 10, TTL: time.Hour}})
			ctx := context.Background()
			if err := c.Set(ctx, "k", []byte("old"), time.Hour, "t"); err != nil {
				t.Fatal(err)
			}
			g.armed.Store(true)
			done := make(chan error, 1)
			go func() { done <- write(ctx, c) }()
			<-g.reached // the write is about to delete in Redis
			_, _, _ = c.Get(ctx, "k")
			close(g.release)
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if v, found, err := c.Get(ctx, "k"); found || err != nil {
				t.Fatalf("Get after %s returned = %q, found %v, err %v: the value it deleted", name, v, found, err)
			}
		})
	}
}

// Two Sets of one key in one process: Redis applies v1 then v2, but v1's
// Set finishes last. The first layer kept v1 (each Set stored its own
// value unconditionally) while Redis holds v2, until Local.TTL. Now a Set
// keeps its value only if nothing else was written while it was in flight.
func TestLocalLayer_OverlappingSetsLeaveWhatRedisHolds(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := client(t, srv)
	g := newGate(true, commandIs("set", "v1"))
	rdb.AddHook(g)
	c := newCache(t, rdb, Config{Local: LocalConfig{MaxEntries: 10, TTL: time.Hour}})
	ctx := context.Background()
	g.armed.Store(true)
	done := make(chan error, 1)
	go func() { done <- c.Set(ctx, "k", []byte("v1"), time.Hour) }()
	<-g.reached // v1 is in Redis; its Set has not returned
	if err := c.Set(ctx, "k", []byte("v2"), time.Hour); err != nil {
		t.Fatal(err)
	}
	close(g.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	inRedis, _ := srv.Client().Get(ctx, c.valueKey("k")).Result()
	if v, _, _ := c.Get(ctx, "k"); string(v) != inRedis {
		t.Fatalf("Get = %q, Redis holds %q", v, inRedis)
	}
}
