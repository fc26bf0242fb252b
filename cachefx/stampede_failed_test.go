package cachefx

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/redisfx/redisfx/internal/obstest"
	"github.com/redisfx/redisfx/internal/redistest"
)

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
