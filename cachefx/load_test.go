package cachefx

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/redisfx/redisfx/internal/obstest"
	"github.com/redisfx/redisfx/internal/redistest"
)

// The cache-aside race: a loader reads the source of truth, the
// application then updates it and writes the cache (in another process),
// and only then does the loader's value arrive. It was stored over the
// write, for the full TTL. Now the write replaces or deletes the load's
// lease, and the loaded value is returned but not stored.
func TestGetOrLoad_ValueLoadedBeforeAWriteIsNotStored(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		write func(context.Context, *Cache) error
		want  string // "" = not found
	}{
		"Delete":           {func(ctx context.Context, c *Cache) error { _, err := c.Delete(ctx, "k"); return err }, ""},
		"Set":              {func(ctx context.Context, c *Cache) error { return c.Set(ctx, "k", []byte("new"), time.Hour) }, "new"},
		"InvalidateByTags": {func(ctx context.Context, c *Cache) error { _, err := c.InvalidateByTags(ctx, "t"); return err }, ""},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			prefix := redistest.Prefix(t)
			loader := newCache(t, client(t, srv), Config{KeyPrefix: prefix})
			writer := newCache(t, client(t, srv), Config{KeyPrefix: prefix})
			ctx := context.Background()
			loading, finish := make(chan struct{}), make(chan struct{})
			got := make(chan string, 1)
			go func() {
				v, err := loader.GetOrLoad(ctx, "k", time.Hour, func(context.Context) ([]byte, error) {
					close(loading)
					<-finish
					return []byte("old"), nil
				}, "t")
				if err != nil {
					t.Error(err)
				}
				got <- string(v)
			}()
			<-loading // the loader has read the source of truth
			if err := tc.write(ctx, writer); err != nil {
				t.Fatal(err)
			}
			close(finish)
			if v := <-got; v != "old" {
				t.Fatalf("GetOrLoad returned %q, want the loaded value", v)
			}
			v, found, err := writer.Get(ctx, "k")
			if err != nil || string(v) != tc.want || found != (tc.want != "") {
				t.Fatalf("after %s during a load: Get = %q found %v err %v, want %q", name, v, found, err, tc.want)
			}
		})
	}
}

// Found by the checker: a GetOrLoad that began after a Delete in the same
// process joined a load that began before it (callers of one key share a
// load) and returned that load's older value. Loads are now shared only
// between callers with no write of the key (or of their tags) between them.
func TestGetOrLoad_NeverJoinsALoadOlderThanAWrite(t *testing.T) {
	t.Parallel()
	c := newCache(t, client(t, redistest.Start(t)), Config{})
	ctx := context.Background()
	loading, finish := make(chan struct{}), make(chan struct{})
	first := make(chan string, 1)
	go func() {
		v, _ := c.GetOrLoad(ctx, "k", time.Hour, func(context.Context) ([]byte, error) {
			close(loading)
			<-finish
			return []byte("old"), nil
		})
		first <- string(v)
	}()
	<-loading
	if _, err := c.Delete(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	second := make(chan string, 1)
	go func() {
		v, _ := c.GetOrLoad(ctx, "k", time.Hour, func(context.Context) ([]byte, error) { return []byte("new"), nil })
		second <- string(v)
	}()
	select {
	case v := <-second:
		if v != "new" {
			t.Fatalf("GetOrLoad after Delete returned %q", v)
		}
	case <-time.After(2 * time.Second): // it joined the load still held below
		close(finish)
		t.Fatalf("GetOrLoad after Delete returned %q: it joined a load that began before the Delete", <-second)
	}
	close(finish)
	<-first
}

// Two different keys never share a load, whatever bytes they hold: the
// single-flight key once joined parts with NUL bytes, so key "a" with tag
// "t" and key "a\x000\x00<tag set of t>" shared one, and the second caller
// got the first key's value without its own loader running.
func TestGetOrLoad_KeysWithSeparatorBytesDoNotShareALoad(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newCache(t, client(t, srv), Config{KeyPrefix: redistest.Prefix(t)})
	ctx := context.Background()
	keyB := "a\x000\x00" + c.tagKey("t")
	started, release := make(chan struct{}), make(chan struct{})
	resA := make(chan []byte, 1)
	go func() {
		v, err := c.GetOrLoad(ctx, "a", time.Minute, func(context.Context) ([]byte, error) {
			close(started)
			<-release
			return []byte("value of a"), nil
		}, "t")
		if err != nil {
			t.Error(err)
		}
		resA <- v
	}()
	<-started
	// B's own loader releases A; if B joined A's load, the timer does.
	unblock := time.AfterFunc(2*time.Second, func() { close(release) })
	v, err := c.GetOrLoad(ctx, keyB, time.Minute, func(context.Context) ([]byte, error) {
		if unblock.Stop() {
			close(release)
		}
		return []byte("value of b"), nil
	})
	if err != nil || string(v) != "value of b" {
		t.Fatalf("GetOrLoad(%q) = %q, %v: it joined another key's load", keyB, v, err)
	}
	if a := <-resA; string(a) != "value of a" {
		t.Fatalf("GetOrLoad(a) = %q", a)
	}
}

// A caller whose context was already done (a request out of time) made its
// Get fail, and GetOrLoad took that for a store outage: it started the
// key's shared load in store-down mode, with no lease and nothing stored.
// Healthy callers of this process joined that load and its value was never
// cached; another process, seeing no lease, ran the loader again. Now a
// done caller returns its context's error and starts no load.
func TestGetOrLoad_DoneCallerDoesNotDecideTheSharedLoad(t *testing.T) {
	for name, twoProcesses := range map[string]bool{"OneProcess": false, "TwoProcesses": true} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			c1 := newCache(t, client(t, srv), Config{})
			c2 := newCache(t, client(t, srv), Config{KeyPrefix: c1.cfg.KeyPrefix})
			var loads atomic.Int32
			loader := func(context.Context) ([]byte, error) {
				loads.Add(1)
				time.Sleep(100 * time.Millisecond) // a slow query: the others overlap it
				return []byte("v"), nil
			}
			ctx := context.Background()
			done, cancel := context.WithCancel(ctx)
			cancel()
			if _, err := c1.GetOrLoad(done, "k", time.Minute, loader); !errors.Is(err, context.Canceled) {
				t.Fatalf("a done caller got %v, want context.Canceled", err)
			}
			others := []*Cache{c1, c1}
			if twoProcesses {
				others = []*Cache{c1, c2}
			}
			var wg sync.WaitGroup
			for _, c := range others {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if v, err := c.GetOrLoad(ctx, "k", time.Minute, loader); err != nil || string(v) != "v" {
						t.Errorf("GetOrLoad = %q %v", v, err)
					}
				}()
			}
			wg.Wait()
			_, found, err := c1.Get(ctx, "k")
			if n := loads.Load(); n != 1 || !found || err != nil {
				t.Fatalf("loader ran %d times (want 1); cached afterwards: %v (err %v)", n, found, err)
			}
		})
	}
}

// holdLease makes other load key with a loader that blocks until the
// returned release is called; it returns once other holds the lease.
func holdLease(t *testing.T, other *Cache, key string) (release func()) {
	t.Helper()
	started, unblock, finished := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		_, _ = other.GetOrLoad(context.Background(), key, time.Minute, func(context.Context) ([]byte, error) {
			close(started)
			<-unblock
			return []byte("small"), nil
		})
	}()
	select {
	case <-started:
	case <-time.After(5 * time.Second):
		t.Fatal("the other process never started its load")
	}
	var once sync.Once
	release = func() { once.Do(func() { close(unblock); <-finished }) }
	t.Cleanup(release)
	return release
}

// MaxValueBytes: GetOrLoad returns a value above it together with its
// *ValueTooLargeError. A caller that waited LoadWait for another process's
// lease and then loaded itself (or loaded with Redis unreachable) got the
// value with a nil error.
func TestGetOrLoad_TooLargeValueLoadedAfterLoadWaitComesWithItsError(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newCache(t, client(t, srv), Config{MaxValueBytes: 10, LoadWait: 50 * time.Millisecond})
	other := newCache(t, client(t, srv), Config{KeyPrefix: c.cfg.KeyPrefix, MaxValueBytes: 10})
	big := []byte(strings.Repeat("x", 100))
	holdLease(t, other, "k")
	v, err := c.GetOrLoad(context.Background(), "k", time.Minute, func(context.Context) ([]byte, error) { return big, nil })
	if !errors.As(err, new(*ValueTooLargeError)) || len(v) != len(big) {
		t.Fatalf("GetOrLoad returned %d bytes (MaxValueBytes 10) with err = %v, want the value and *ValueTooLargeError", len(v), err)
	}
}

// cache_stampede_prevented_total counts the callers that got the value
// without running the loader. A caller that waited for another process's
// lease, gave up after LoadWait and ran the loader itself was counted.
func TestGetOrLoad_StampedeMetricSkipsACallerThatLoadedAfterWaiting(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	reg := prometheus.NewRegistry()
	c := newCache(t, client(t, srv), Config{LoadWait: 50 * time.Millisecond}, WithRegisterer(reg))
	other := newCache(t, client(t, srv), Config{KeyPrefix: c.cfg.KeyPrefix})
	holdLease(t, other, "k")
	var loads atomic.Int32
	if _, err := c.GetOrLoad(context.Background(), "k", time.Minute, func(context.Context) ([]byte, error) { loads.Add(1); return []byte("v"), nil }); err != nil {
		t.Fatal(err)
	}
	if n, prevented := loads.Load(), obstest.Value(t, reg, "cache_stampede_prevented_total"); n != 1 || prevented != 0 {
		t.Fatalf("the caller ran the loader itself (%d times), yet cache_stampede_prevented_total = %v", n, prevented)
	}
}

// Fix (7) / docs/cache.md: "Every caller that got the value without
// running the loader counts once in cache_stampede_prevented_total". When
// the shared load fails, no caller got a value, yet every caller that
// shared the failed load is counted.
// Every caller that joined a load that failed was counted in
// cache_stampede_prevented_total, though none got a value (found by an
// adversary): only callers that got the value count.
func TestGetOrLoad_StampedeMetricSkipsCallersOfAFailedLoad(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	reg := prometheus.NewRegistry()
	c := newCache(t, client(t, srv), Config{}, WithRegisterer(reg))
	boom := errors.New("database down")
	release := make(chan struct{})
	var loads atomic.Int32
	loader := func(context.Context) ([]byte, error) {
		loads.Add(1)
		<-release
		return nil, boom
	}
	const callers = 5
	var wg sync.WaitGroup
	var gotValue atomic.Int32
	for i := 0; i < callers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if v, err := c.GetOrLoad(context.Background(), "k", time.Minute, loader); err == nil || v != nil {
				gotValue.Add(1)
			}
		}()
	}
	time.Sleep(300 * time.Millisecond) // the callers join the one load: a slow query's time, not a signal (there is none for joining)
	close(release)
	wg.Wait()
	prevented := obstest.Value(t, reg, "cache_stampede_prevented_total")
	t.Logf("loader ran %d times; callers that got a value: %d; cache_stampede_prevented_total = %v", loads.Load(), gotValue.Load(), prevented)
	if gotValue.Load() == 0 && prevented != 0 {
		t.Fatalf("no caller got the value (the load failed), yet cache_stampede_prevented_total = %v", prevented)
	}
}

// A loader that leaves by runtime.Goexit (t.FailNow in a loader under test)
// fails like a panic: every caller sharing the load gets an error at once,
// and the lease is released, so the next caller loads without waiting
// LoadWait.
func TestGetOrLoad_LoaderGoexit_EveryCallerGetsAnError_AndTheLeaseIsReleased(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newCache(t, client(t, srv), Config{LoadWait: time.Minute})
	release := make(chan struct{})
	goexit := func(context.Context) ([]byte, error) { <-release; runtime.Goexit(); return nil, nil }
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	const callers = 5
	errs := make(chan error, callers)
	for range callers {
		go func() { _, err := c.GetOrLoad(ctx, "k", time.Minute, goexit); errs <- err }()
	}
	time.Sleep(50 * time.Millisecond) // lets the callers join one load; the assertions hold whether they do or not
	close(release)
	for range callers {
		if err := <-errs; err == nil || !strings.Contains(err.Error(), "Goexit") {
			t.Fatalf("a caller of a loader that called Goexit got %v, want an error naming Goexit", err)
		}
	}
	v, err := c.GetOrLoad(ctx, "k", time.Minute, func(context.Context) ([]byte, error) { return []byte("v"), nil })
	if err != nil || string(v) != "v" {
		t.Fatalf("the next load = %q, %v: want it to run at once (the lease released)", v, err)
	}
	if got, found, err := c.Get(ctx, "k"); !found || string(got) != "v" || err != nil {
		t.Fatalf("after the next load: %q %v %v, want it stored", got, found, err)
	}
}
