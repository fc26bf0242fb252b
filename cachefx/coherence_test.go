package cachefx

import (
	"context"
	"testing"
	"time"

	"github.com/redisfx/redisfx/internal/faultproxy"
	"github.com/redisfx/redisfx/internal/redistest"
	"github.com/redisfx/redisfx/storefx"
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

// A write that failed on a stalled connection may reach Redis late, and
// delete a value written meanwhile. On a single server its message is in
// its pipeline and lands with it, so a process that cached the newer value
// drops it then (docs/cache.md, "A write that returned an error"). On a
// Cluster the message goes out when the write fails; the checker excuses
// what it cannot tell (mayLandUntil).
func TestLocalLayer_FailedDeleteLandingLate_OthersDropWhatItDeleted(t *testing.T) {
	t.Parallel()
	srv := redistest.StartPrivate(t)
	px := faultproxy.Start(t, srv.Addr())
	viaProxy, err := storefx.New("default", storefx.Config{Addrs: []string{px.Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = viaProxy.Close() })
	prefix := redistest.Prefix(t)
	local := LocalConfig{MaxEntries: 10, TTL: time.Minute}
	writer := newCache(t, viaProxy, Config{KeyPrefix: prefix, Local: local, StoreTimeout: 100 * time.Millisecond})
	reader := newCache(t, client(t, srv), Config{KeyPrefix: prefix, Local: local})
	ctx := context.Background()
	if _, err := writer.Delete(ctx, "other"); err != nil { // a pooled connection to stall, not a dial
		t.Fatal(err)
	}
	px.SetMode(faultproxy.Freeze)
	if _, err := writer.Delete(ctx, "k"); err == nil {
		t.Fatal("Delete through a stalled connection returned nil")
	}
	if err := reader.Set(ctx, "k", []byte("new"), time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, cached := reader.local.get(reader.valueKey("k"), time.Now()); !cached {
		t.Fatal("the reader's Set left no copy in its first layer")
	}
	px.SetMode(faultproxy.Forward) // the held DEL lands now, after the reader's Set
	waitUntil(t, 2*time.Second, func() bool { return srv.Client().Exists(ctx, reader.valueKey("k")).Val() == 0 })
	landed := time.Now()
	waitUntil(t, 3*time.Second, func() bool { return reader.bcast.proofAfter(landed) })
	if v, found, _ := reader.Get(ctx, "k"); found {
		t.Fatalf("reader serves %q after the late DEL deleted it in Redis", v)
	}
}
