package cachefx

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/redisfx/redisfx"
	"github.com/redisfx/redisfx/internal/obstest"
	"github.com/redisfx/redisfx/internal/redistest"
	"github.com/redisfx/redisfx/plugintrace"
	"github.com/redisfx/redisfx/storefx"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(redistest.ForExamples(m), goleak.IgnoreTopFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}

// client connects to srv; it is closed when t ends.
func client(t testing.TB, srv *redistest.Server) *storefx.Client {
	t.Helper()
	c, err := storefx.New("default", storefx.Config{URL: srv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// newCache is a started cache on c with a prefix of its own unless cfg
// has one.
func newCache(t testing.TB, c *storefx.Client, cfg Config, opts ...Option) *Cache {
	t.Helper()
	if cfg.KeyPrefix == "" {
		cfg.KeyPrefix = redistest.Prefix(t)
	}
	cache, err := New(c, cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if err := cache.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cache.Close() })
	return cache
}

func TestSetGetDelete_HitAndMiss(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	c := newCache(t, client(t, redistest.Start(t)), Config{}, WithRegisterer(reg))
	ctx := context.Background()
	if _, found, err := c.Get(ctx, "user:1"); found || err != nil {
		t.Fatalf("empty cache: found=%v err=%v", found, err)
	}
	if err := c.Set(ctx, "user:1", []byte("ada"), time.Minute); err != nil {
		t.Fatal(err)
	}
	v, found, err := c.Get(ctx, "user:1")
	if err != nil || !found || string(v) != "ada" {
		t.Fatalf("get = %q %v %v", v, found, err)
	}
	if n, err := c.Delete(ctx, "user:1", "never-set"); n != 1 || err != nil {
		t.Fatalf("delete = %d %v", n, err)
	}
	if _, found, _ := c.Get(ctx, "user:1"); found {
		t.Fatal("deleted value still found")
	}
	if hits, misses := obstest.Value(t, reg, "cache_hits_total", "layer", "redis"), obstest.Value(t, reg, "cache_misses_total"); hits != 1 || misses != 2 {
		t.Fatalf("hits %v misses %v, want 1 and 2", hits, misses)
	}
}

func TestExpiry(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newCache(t, client(t, srv), Config{DefaultTTL: 150 * time.Millisecond})
	ctx := context.Background()
	if err := c.Set(ctx, "k", []byte("v"), 0); err != nil {
		t.Fatal(err)
	}
	if pttl := srv.Client().PTTL(ctx, c.valueKey("k")).Val(); pttl <= 0 || pttl > 150*time.Millisecond {
		t.Fatalf("PTTL %v, want the DefaultTTL", pttl)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, found, err := c.Get(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		if !found {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("value never expired")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestTags_InvalidateByTags(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newCache(t, client(t, srv), Config{})
	ctx := context.Background()
	for key, tags := range map[string][]string{"a": {"t1"}, "b": {"t1", "t2"}, "c": {"t2"}, "d": nil} {
		if err := c.Set(ctx, key, []byte(key), time.Minute, tags...); err != nil {
			t.Fatal(err)
		}
	}
	if pttl := srv.Client().PTTL(ctx, c.tagKey("t1")).Val(); pttl <= 0 {
		t.Fatalf("tag set PTTL %v: a tag set must always expire", pttl)
	}
	n, err := c.InvalidateByTags(ctx, "t1")
	if err != nil || n != 2 {
		t.Fatalf("invalidate t1 = %d %v, want 2", n, err)
	}
	for key, want := range map[string]bool{"a": false, "b": false, "c": true, "d": true} {
		if _, found, _ := c.Get(ctx, key); found != want {
			t.Errorf("%s found=%v after invalidating t1, want %v", key, found, want)
		}
	}
	// Its members are retired: kept for a grace (other processes'
	// invalidations of t1 still find them), then gone with the set.
	if pttl := srv.Client().PTTL(ctx, c.tagKey("t1")).Val(); pttl > retiredGrace+10*time.Millisecond { // (rounded up to the ms)
		t.Errorf("tag set t1 lives %v after its invalidation, longer than the grace %v", pttl, retiredGrace)
	}
	// b is gone but still a member of t2: invalidating t2 deletes c only.
	if n, err := c.InvalidateByTags(ctx, "t2", "never-used"); err != nil || n != 1 {
		t.Fatalf("invalidate t2 = %d %v, want 1", n, err)
	}
}

func TestNamespacesAreSeparate(t *testing.T) {
	t.Parallel()
	c := newCache(t, client(t, redistest.Start(t)), Config{})
	ctx := context.Background()
	users, orders := c.Namespace("users"), c.Namespace("orders")
	if err := users.Set(ctx, "42", []byte("user"), time.Minute, "x"); err != nil {
		t.Fatal(err)
	}
	if _, found, _ := orders.Get(ctx, "42"); found {
		t.Fatal("a value crossed namespaces")
	}
	if n, _ := orders.InvalidateByTags(ctx, "x"); n != 0 {
		t.Fatal("a tag crossed namespaces")
	}
	if _, found, _ := users.Get(ctx, "42"); !found {
		t.Fatal("value lost")
	}
	for _, bad := range []string{"", "a:b", "a#b", strings.Repeat("n", 65)} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Namespace(%q) accepted", bad)
				}
			}()
			c.Namespace(bad)
		}()
	}
}

func TestValueTooLargeIsRefused(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newCache(t, client(t, srv), Config{MaxValueBytes: 10})
	ctx := context.Background()
	err := c.Set(ctx, "big", bytes.Repeat([]byte("x"), 11), 0)
	var tooLarge *ValueTooLargeError
	if !errors.As(err, &tooLarge) || tooLarge.Size != 11 || tooLarge.Max != 10 || !strings.Contains(err.Error(), "MaxValueBytes") {
		t.Fatalf("err = %v", err)
	}
	var base *redisfx.BaseError
	if !errors.As(err, &base) || base.Code != "cache_value_too_large" {
		t.Fatalf("base error %v", base)
	}
	if srv.Client().Exists(ctx, c.valueKey("big")).Val() != 0 {
		t.Fatal("a refused value was stored")
	}
	if err := c.Set(ctx, "fits", bytes.Repeat([]byte("x"), 10), 0); err != nil {
		t.Fatal(err)
	}
}

// 100 goroutines, spread over two caches standing for two processes, ask
// for one missing key: the loader runs once, everyone gets its value, and
// each caller that did not load either waited (a prevented stampede) or
// found the stored value.
func TestStampede_HundredGoroutinesLoadOnce(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	prefix := redistest.Prefix(t)
	regs := []*prometheus.Registry{prometheus.NewRegistry(), prometheus.NewRegistry()}
	caches := []*Cache{
		newCache(t, client(t, srv), Config{KeyPrefix: prefix}, WithRegisterer(regs[0])),
		newCache(t, client(t, srv), Config{KeyPrefix: prefix}, WithRegisterer(regs[1])),
	}
	var loads atomic.Int64
	start := make(chan struct{})
	var wg sync.WaitGroup
	results := make([]string, 100)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			v, err := caches[i%2].GetOrLoad(context.Background(), "report", time.Minute, func(context.Context) ([]byte, error) {
				loads.Add(1)
				time.Sleep(200 * time.Millisecond) // an expensive load: the window of the stampede
				return []byte("expensive"), nil
			})
			if err != nil {
				t.Error(err)
			}
			results[i] = string(v)
		}()
	}
	close(start)
	wg.Wait()
	if n := loads.Load(); n != 1 {
		t.Fatalf("loader ran %d times, want 1", n)
	}
	for i, r := range results {
		if r != "expensive" {
			t.Fatalf("caller %d got %q", i, r)
		}
	}
	var prevented, hits float64
	for _, reg := range regs {
		prevented += obstest.Value(t, reg, "cache_stampede_prevented_total")
		hits += obstest.Value(t, reg, "cache_hits_total", "layer", "redis")
	}
	// The other process's leader counts once more (its guard was taken).
	if prevented+hits < 99 || prevented < 50 {
		t.Fatalf("prevented %v + hits %v: every caller but the loader must be accounted for", prevented, hits)
	}
}

func TestGetOrLoad_LoaderErrorIsNotCached(t *testing.T) {
	t.Parallel()
	c := newCache(t, client(t, redistest.Start(t)), Config{})
	ctx := context.Background()
	boom := errors.New("backend down")
	if _, err := c.GetOrLoad(ctx, "k", 0, func(context.Context) ([]byte, error) { return nil, boom }); !errors.Is(err, boom) {
		t.Fatalf("err = %v", err)
	}
	v, err := c.GetOrLoad(ctx, "k", 0, func(context.Context) ([]byte, error) { return []byte("ok"), nil })
	if err != nil || string(v) != "ok" {
		t.Fatalf("second load = %q %v", v, err)
	}
	if _, err := c.GetOrLoad(ctx, "p", 0, func(context.Context) ([]byte, error) { panic("loader bug") }); err == nil || !strings.Contains(err.Error(), "panicked") {
		t.Fatalf("panic = %v", err)
	}
}

// A crashed loader's lease blocks the others at most LoadWait, then they load.
func TestGetOrLoad_StaleLeaseWaitsAtMostLoadWait(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newCache(t, client(t, srv), Config{LoadGuardTTL: time.Hour, LoadWait: 200 * time.Millisecond})
	ctx := context.Background()
	srv.Client().HSet(ctx, c.valueKey("k"), "lease", "crashed-process")
	srv.Client().Expire(ctx, c.valueKey("k"), time.Hour)
	began := time.Now()
	v, err := c.GetOrLoad(ctx, "k", 0, func(context.Context) ([]byte, error) { return []byte("v"), nil })
	if err != nil || string(v) != "v" {
		t.Fatalf("= %q %v", v, err)
	}
	if d := time.Since(began); d < 150*time.Millisecond || d > 3*time.Second {
		t.Fatalf("waited %v with LoadWait 200ms", d)
	}
}

// Redis down: Get reports it, GetOrLoad serves from the loader.
func TestStoreDown_GetOrLoadServesFromLoader(t *testing.T) {
	t.Parallel()
	srv := redistest.StartPrivate(t)
	c := newCache(t, client(t, srv), Config{StoreTimeout: 200 * time.Millisecond})
	srv.Kill()
	ctx := context.Background()
	if _, _, err := c.Get(ctx, "k"); err == nil {
		t.Fatal("Get with Redis down: no error")
	}
	v, err := c.GetOrLoad(ctx, "k", 0, func(context.Context) ([]byte, error) { return []byte("fresh"), nil })
	if err != nil || string(v) != "fresh" {
		t.Fatalf("GetOrLoad with Redis down = %q %v", v, err)
	}
}

func TestLocalLayer_BoundedAndServesHits(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	c := newCache(t, client(t, redistest.Start(t)), Config{Local: LocalConfig{MaxEntries: 10, TTL: time.Minute}}, WithRegisterer(reg))
	ctx := context.Background()
	for i := range 100 {
		if err := c.Set(ctx, fmt.Sprint(i), []byte{byte(i)}, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if n := obstest.Value(t, reg, "cache_size", "layer", "local"); n != 10 {
		t.Fatalf("cache_size{layer=local} = %v, want the bound 10", n)
	}
	for _, k := range []string{"99", "0"} {
		if v, found, err := c.Get(ctx, k); !found || err != nil || len(v) != 1 {
			t.Fatalf("get %s = %v %v %v", k, v, found, err)
		}
	}
	// 99 was among the 10 most recent: the first layer answered; 0 was
	// evicted: Redis answered (and 0 is now in the first layer).
	if l, r := obstest.Value(t, reg, "cache_hits_total", "layer", "local"), obstest.Value(t, reg, "cache_hits_total", "layer", "redis"); l != 1 || r != 1 {
		t.Fatalf("hits local %v redis %v, want 1 and 1", l, r)
	}
	if _, _, err := c.Get(ctx, "0"); err != nil || obstest.Value(t, reg, "cache_hits_total", "layer", "local") != 2 {
		t.Fatal("a value read from Redis was not kept in the first layer")
	}
}

// A write in one process drops the other's first-layer copy: the local TTL
// is an hour, so only the invalidation message can make the new value seen.
func TestLocalLayer_InvalidatedAcrossProcesses(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	prefix := redistest.Prefix(t)
	local := LocalConfig{MaxEntries: 100, TTL: time.Hour}
	a := newCache(t, client(t, srv), Config{KeyPrefix: prefix, Local: local})
	b := newCache(t, client(t, srv), Config{KeyPrefix: prefix, Local: local})
	ctx := context.Background()
	if err := a.Set(ctx, "price", []byte("10"), time.Hour, "prices"); err != nil {
		t.Fatal(err)
	}
	if v, _, _ := b.Get(ctx, "price"); string(v) != "10" { // b keeps a copy
		t.Fatalf("b read %q", v)
	}
	waitFor := func(want string, found bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			v, f, _ := b.Get(ctx, "price")
			if f == found && string(v) == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("b still reads %q (found %v), want %q (found %v)", v, f, want, found)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	if err := a.Set(ctx, "price", []byte("12"), time.Hour, "prices"); err != nil {
		t.Fatal(err)
	}
	waitFor("12", true)
	if _, err := a.InvalidateByTags(ctx, "prices"); err != nil {
		t.Fatal(err)
	}
	waitFor("", false)
}

// Keys and tags are redacted in spans and errors unless Config.KeyAttribute
// says otherwise.
func TestKeysAreRedactedByDefault(t *testing.T) {
	t.Parallel()
	spans := obstest.NewSpans(t)
	c := newCache(t, client(t, redistest.Start(t)), Config{}, WithTracerProvider(spans.Tracer()))
	ctx := context.Background()
	const key = "user:alice@example.com"
	_ = c.Set(ctx, key, []byte("{}"), time.Minute, "customer:42")
	_, _, _ = c.Get(ctx, key)
	_, _ = c.Delete(ctx, key, "other")
	_, _ = c.InvalidateByTags(ctx, "customer:42")
	err := c.Set(ctx, key, []byte("{}"), -time.Second)
	if err == nil || strings.Contains(err.Error(), "alice") || !strings.Contains(err.Error(), plugintrace.Redacted) {
		t.Errorf("error %v names the key", err)
	}
	all := spans.All(t)
	if len(all) < 4 {
		t.Fatalf("%d spans", len(all))
	}
	for _, s := range all {
		b, _ := json.Marshal(s)
		if strings.Contains(string(b), "alice") || strings.Contains(string(b), "customer:42") {
			t.Errorf("%s holds a key: %s", s.Name, b)
		}
	}
	if d := spans.Named(t, "cache.delete"); len(d) != 1 || d[0].Attributes[AttrKey] != plugintrace.Redacted+","+plugintrace.Redacted {
		t.Errorf("cache.delete: %+v", d)
	}
}

func TestSpansAndMetrics(t *testing.T) {
	t.Parallel()
	spans := obstest.NewSpans(t)
	reg := prometheus.NewRegistry()
	hash := plugintrace.HashKey([]byte("secret"))
	c := newCache(t, client(t, redistest.Start(t)), Config{Namespace: "catalog", KeyAttribute: hash}, WithRegisterer(reg), WithTracerProvider(spans.Tracer()))
	ctx := context.Background()
	_, _, _ = c.Get(ctx, "sku-1")
	_ = c.Set(ctx, "sku-1", []byte("{}"), time.Minute, "shoes", "sale")
	_, _, _ = c.Get(ctx, "sku-1")
	_, _ = c.InvalidateByTags(ctx, "shoes", "sale")

	gets := spans.Named(t, "cache.get")
	if len(gets) != 2 {
		t.Fatalf("cache.get spans: %+v", gets)
	}
	for i, want := range []struct {
		hit   bool
		event string
	}{{false, "cache.miss"}, {true, "cache.hit"}} {
		s := gets[i]
		if s.Attributes[AttrHit] != want.hit || obstest.EventNames(s)[0] != want.event || s.Attributes["db.operation"] != "GET" ||
			s.Attributes[AttrNamespace] != "catalog" || s.Attributes[AttrKey] != hash.Value("sku-1") || s.Attributes["redisfx.plugin"] != "cache" ||
			s.Attributes["db.system"] != "redis" || s.Attributes["redisfx.duration_ms"] == nil || s.Status.Code != "OK" || s.Kind != "INTERNAL" {
			t.Errorf("cache.get #%d: %+v", i, s)
		}
	}
	set := spans.Named(t, "cache.set")
	if len(set) != 1 || set[0].Attributes[AttrKey] != hash.Value("sku-1") || obstest.EventNames(set[0])[0] != "cache.stored" || set[0].Attributes["db.operation"] != "SET" {
		t.Errorf("cache.set: %+v", set)
	}
	inv := spans.Named(t, "cache.invalidate_by_tags")
	if len(inv) != 1 {
		t.Fatalf("cache.invalidate_by_tags: %+v", inv)
	}
	if tags, _ := inv[0].Attributes[AttrTags].([]any); len(tags) != 2 || tags[0] != hash.Value("shoes") || tags[1] != hash.Value("sale") {
		t.Errorf("tags attribute %v", inv[0].Attributes[AttrTags])
	}
	ev := inv[0].Events
	if len(ev) != 3 || ev[0].Name != "tag.lookup" || ev[1].Name != "keys.found" || ev[1].Attributes["count"] != float64(1) ||
		ev[2].Name != "keys.deleted" || ev[2].Attributes["count"] != float64(1) {
		t.Errorf("invalidate events %+v", ev)
	}
	if h, m := obstest.Value(t, reg, "cache_hits_total", "layer", "redis"), obstest.Value(t, reg, "cache_misses_total"); h != 1 || m != 1 {
		t.Errorf("hits %v misses %v", h, m)
	}
	_ = obstest.Value(t, reg, "cache_stampede_prevented_total")
}

func TestConfigNamesTheOption(t *testing.T) {
	for opt, c := range map[string]Config{
		"MaxValueBytes": {MaxValueBytes: -1}, "DefaultTTL": {DefaultTTL: -1}, "Local.TTL": {Local: LocalConfig{TTL: -1}},
		"Local.MaxEntries": {Local: LocalConfig{MaxEntries: -1}}, "LoadGuardTTL": {LoadGuardTTL: -time.Second},
	} {
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "Config."+opt+":") {
			t.Errorf("%s: %v", opt, err)
		}
	}
	if _, err := New(nil, Config{Namespace: "a:b"}); err == nil || !strings.Contains(err.Error(), "Namespace") {
		t.Errorf("bad namespace: %v", err)
	}
}

// Below 1 ms a duration Redis keeps in whole milliseconds becomes 0: a
// LoadGuardTTL of 500µs took every lease with PEXPIRE 0 (nothing was ever
// cached), one of 2ns made the renewal's ticker (LoadGuardTTL/3) panic in a
// goroutine and killed the process. Both were accepted. The durations used
// only in this process (LoadWait, StoreTimeout, Local.TTL, whose ping
// interval is at least 50 ms) have no such floor.
func TestConfig_SubMillisecondDurationsRedisKeepsAreRefused(t *testing.T) {
	for _, tc := range []struct {
		opt string
		c   Config
	}{
		{"LoadGuardTTL", Config{LoadGuardTTL: 500 * time.Microsecond}}, {"LoadGuardTTL", Config{LoadGuardTTL: 2}},
		{"DefaultTTL", Config{DefaultTTL: 999 * time.Microsecond}},
	} {
		opt, c := tc.opt, tc.c
		var cfgErr *redisfx.ConfigError
		if err := c.Validate(); !errors.As(err, &cfgErr) || !strings.Contains(err.Error(), "Config."+opt+":") {
			t.Errorf("%s: %v", opt, err)
		}
	}
	for _, c := range []Config{{LoadGuardTTL: time.Millisecond}, {LoadWait: time.Nanosecond}, {StoreTimeout: time.Microsecond}, {Local: LocalConfig{TTL: time.Nanosecond}}} {
		if err := c.Validate(); err != nil {
			t.Errorf("%+v refused: %v", c, err)
		}
	}
}

// After Redis loses its script cache (a restart), invalidation loads the
// script again instead of failing.
func TestInvalidateByTags_AfterScriptCacheLoss(t *testing.T) {
	t.Parallel()
	srv := redistest.StartPrivate(t)
	c := newCache(t, client(t, srv), Config{})
	ctx := context.Background()
	_ = c.Set(ctx, "a", []byte("1"), time.Minute, "t")
	if err := srv.Client().ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := c.InvalidateByTags(ctx, "t"); err != nil || n != 1 {
		t.Fatalf("= %d %v", n, err)
	}
}

// A value read from Redis while a write or invalidation happens is not
// kept in the first layer: it may already be stale.
func TestLocalLayer_ReadRacingAnInvalidationIsNotKept(t *testing.T) {
	l := newLocalLayer(10, time.Hour)
	now := time.Now()
	seen := l.currentEpoch()                                // a Get starts reading "old" from Redis
	l.delete("k")                                           // meanwhile an invalidation arrives
	l.fill("k", []byte("old"), time.Hour, now, seen, false) // the read completes
	if _, ok := l.get("k", now); ok {
		t.Fatal("a value read across an invalidation was kept")
	}
	seen = l.currentEpoch()
	l.fill("k", []byte("fresh"), time.Hour, now, seen, false)
	if v, ok := l.get("k", now); !ok || string(v) != "fresh" {
		t.Fatal("an undisturbed read was not kept")
	}
}

// After Redis restarts, the invalidation subscription is back: a write in
// one process still drops the other's first-layer copy.
func TestLocalLayer_InvalidationSurvivesARedisRestart(t *testing.T) {
	t.Parallel()
	srv := redistest.StartPrivate(t)
	prefix := redistest.Prefix(t)
	local := LocalConfig{MaxEntries: 100, TTL: time.Hour}
	a := newCache(t, client(t, srv), Config{KeyPrefix: prefix, Local: local})
	b := newCache(t, client(t, srv), Config{KeyPrefix: prefix, Local: local})
	ctx := context.Background()
	srv.Restart()
	deadline := time.Now().Add(15 * time.Second)
	for attempt := 0; ; attempt++ {
		// Each round: b caches a value, a overwrites it; once b's
		// subscription is back, b sees the new value.
		v := fmt.Sprint("v", attempt)
		_ = a.Set(ctx, "k", []byte("old"+v), time.Hour)
		_, _, _ = b.Get(ctx, "k")
		_ = a.Set(ctx, "k", []byte(v), time.Hour)
		seen := false
		for end := time.Now().Add(200 * time.Millisecond); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
			if got, _, _ := b.Get(ctx, "k"); string(got) == v {
				seen = true
				break
			}
		}
		if seen {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("invalidations never reached the other process after the restart")
		}
	}
}

// A Redis that hangs (CLIENT PAUSE) costs GetOrLoad at most StoreTimeout
// before it serves from the loader.
func TestStoreHangs_GetOrLoadBoundedByStoreTimeout(t *testing.T) {
	t.Parallel()
	srv := redistest.StartPrivate(t)
	c := newCache(t, client(t, srv), Config{StoreTimeout: 200 * time.Millisecond})
	srv.Pause(context.Background(), 3*time.Second)
	began := time.Now()
	v, err := c.GetOrLoad(context.Background(), "k", 0, func(context.Context) ([]byte, error) { return []byte("fresh"), nil })
	if err != nil || string(v) != "fresh" {
		t.Fatalf("= %q %v", v, err)
	}
	if d := time.Since(began); d > 1500*time.Millisecond {
		t.Fatalf("GetOrLoad took %v against a hanging Redis with StoreTimeout 200ms", d)
	}
}

// Set keeps its own copy in the first layer: the caller may reuse its buffer.
func TestLocalLayer_SetCopiesTheValue(t *testing.T) {
	t.Parallel()
	c := newCache(t, client(t, redistest.Start(t)), Config{Local: LocalConfig{MaxEntries: 10}})
	ctx := context.Background()
	buf := []byte("first")
	_ = c.Set(ctx, "k", buf, time.Minute)
	copy(buf, "XXXXX")
	if v, _, _ := c.Get(ctx, "k"); string(v) != "first" {
		t.Fatalf("first layer holds %q after the caller reused its buffer", v)
	}
}

// The first layer keeps a value no longer than Redis does. Redis keeps a
// Set's ttl in whole milliseconds (PX truncates 20.999 ms to 20 ms), but
// the first layer kept the full ttl: right after Redis had dropped the
// value, Get still answered it from the layer.
func TestLocalLayer_FractionalMillisecondTTLEndsWithRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newCache(t, client(t, srv), Config{Local: LocalConfig{MaxEntries: 10}})
	direct := srv.Client()
	defer direct.Close()
	ctx := context.Background()
	full := c.valueKey("k")
	const ttl = 20*time.Millisecond + 999*time.Microsecond
	for i := 0; i < 20; i++ {
		if err := c.Set(ctx, "k", []byte("v"), ttl); err != nil {
			t.Fatal(err)
		}
		// Poll without pausing: the layer outlived Redis by under a millisecond.
		for deadline := time.Now().Add(time.Second); direct.Exists(ctx, full).Val() != 0; {
			if time.Now().After(deadline) {
				t.Fatal("Redis kept the value past its ttl")
			}
		}
		if _, found, err := c.Get(ctx, "k"); err != nil || found {
			t.Fatalf("attempt %d: Get found the value (err %v) after Redis had expired it (ttl %v)", i, err, ttl)
		}
	}
	if err := c.Set(ctx, "k", []byte("v"), 999*time.Microsecond); err == nil || !strings.Contains(err.Error(), "1ms") {
		t.Fatalf("Set with a ttl below Redis's resolution: %v", err)
	}
}

// Found by an adversary (helper-77): GetOrLoad kept the loader's own slice
// in the first layer, so a loader reusing its buffer after returning made
// Get answer the rewritten bytes while Redis held the loaded value.
func TestLocalLayer_GetOrLoadCopiesTheLoadersValue(t *testing.T) {
	t.Parallel()
	c := newCache(t, client(t, redistest.Start(t)), Config{Local: LocalConfig{MaxEntries: 10}})
	ctx := context.Background()
	buf := []byte("first")
	if _, err := c.GetOrLoad(ctx, "k", time.Minute, func(context.Context) ([]byte, error) { return buf, nil }); err != nil {
		t.Fatal(err)
	}
	copy(buf, "XXXXX")
	if v, _, _ := c.Get(ctx, "k"); string(v) != "first" {
		t.Fatalf("first layer holds %q after the loader reused its buffer", v)
	}
}
