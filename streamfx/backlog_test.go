package streamfx

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/redisfx/redisfx/internal/faultproxy"
	"github.com/redisfx/redisfx/internal/obstest"
	"github.com/redisfx/redisfx/internal/redistest"
	"github.com/redisfx/redisfx/storefx"
)

// While Streams runs, a scrape serves the backlog read in the background:
// with Redis frozen it answers at once (median within 50ms), and stream_length and
// stream_consumer_lag keep their last values instead of vanishing (which
// would silently resolve the lag and dead-letter alerts).
func TestMetrics_BacklogScrapeNeverWaitsForRedis_AndKeepsTheLastValue(t *testing.T) {
	t.Parallel()
	srv := redistest.StartPrivate(t)
	proxy := faultproxy.Start(t, srv.Addr())
	c, err := storefx.New("default", storefx.Config{URL: "redis://" + proxy.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	reg := prometheus.NewRegistry()
	s, err := New(c, Config{StoreTimeout: time.Second}, WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	s.obs.backlog.every = 50 * time.Millisecond
	stream := redistest.Prefix(t) + "backlog"
	ctx := context.Background()
	srv.Client().XGroupCreateMkStream(ctx, stream, s.Config().Group, "0")
	for range 3 {
		if _, err := s.Publish(ctx, stream, []byte("m")); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if n := obstest.Value(t, reg, "stream_length", "stream", stream); n != 3 {
		t.Fatalf("stream_length = %v after Start, want 3", n)
	}

	proxy.SetMode(faultproxy.Freeze)
	defer proxy.SetMode(faultproxy.Forward)
	// Background reads time out meanwhile (every 50ms, a second each). A
	// scrape that waited for one would take a second: the median is bound
	// to 50ms, the slowest (a loaded machine) to 500ms.
	var took []time.Duration
	for end := time.Now().Add(2500 * time.Millisecond); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		began := time.Now()
		length := obstest.Value(t, reg, "stream_length", "stream", stream)
		lag := obstest.Value(t, reg, "stream_consumer_lag", "stream", stream, "group", s.Config().Group)
		took = append(took, time.Since(began))
		if length != 3 || lag != 3 {
			t.Fatalf("with Redis frozen stream_length = %v, stream_consumer_lag = %v, want the last values 3 and 3", length, lag)
		}
	}
	sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
	median, slowest := took[len(took)/2], took[len(took)-1]
	t.Logf("with Redis frozen: %d scrapes, median %v, slowest %v", len(took), median, slowest)
	if median > 50*time.Millisecond || slowest > 500*time.Millisecond {
		t.Errorf("with Redis frozen, scrapes took %v (median, bound 50ms), slowest %v (bound 500ms)", median, slowest)
	}
}
