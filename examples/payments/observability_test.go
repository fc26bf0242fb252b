package main

import (
	"net/http"
	"sort"
	"testing"
	"time"

	"github.com/redisfx/redisfx/internal/faultproxy"
	"github.com/redisfx/redisfx/internal/redistest"
)

// With the connection to Redis frozen (bytes held both ways, nothing
// closed), /metrics and /readyz answer at once (bounds below): they read the
// background health check and the stream backlog read in the background,
// so a Prometheus with a 1s scrape timeout keeps scraping and sees
// store_up 0. (They used to ping Redis at scrape time, a second per
// client, and read the streams for another second.)
func TestPayments_RedisFrozen_MetricsAndReadyzAnswerAtOnce(t *testing.T) {
	t.Parallel()
	srv := redistest.StartPrivate(t)
	proxy := faultproxy.Start(t, srv.Addr())
	p := start(t, "REDIS_URL=redis://"+proxy.Addr())
	if r := p.pay("frozen-1", card); r.status != http.StatusCreated { // payment.created now has a backlog series
		t.Fatalf("POST: %d %s", r.status, r.body)
	}
	if metric(p.do("GET", "/metrics", "", "").body, `payments_store_up{client="default"}`) != 1 {
		t.Fatal("store_up is not 1 with Redis up")
	}
	healthy := answerTimes(p, 20)
	proxy.SetMode(faultproxy.Freeze)
	defer proxy.SetMode(faultproxy.Forward)
	frozenAt := time.Now()
	var frozen []time.Duration
	storeUp := 1.0
	for i := 0; i < 20 || storeUp != 0; i++ {
		// The health check notices within an interval and a timeout; the
		// bound leaves room for a loaded machine, where its timers run late.
		if time.Since(frozenAt) > 20*time.Second {
			t.Fatalf("store_up still %v 20s after the freeze", storeUp)
		}
		began := time.Now()
		scrape := p.do("GET", "/metrics", "", "").body
		frozen = append(frozen, time.Since(began))
		storeUp = metric(scrape, `payments_store_up{client="default"}`)
		began = time.Now()
		ready := p.do("GET", "/readyz", "", "")
		frozen = append(frozen, time.Since(began))
		if storeUp == 0 && ready.status != http.StatusServiceUnavailable {
			t.Fatalf("store_up 0 but /readyz %d", ready.status)
		}
		if metric(scrape, `payments_stream_length{stream="payment.created"}`) < 0 {
			t.Fatal("stream_length vanished with Redis frozen")
		}
		time.Sleep(50 * time.Millisecond) // sampling while the freeze lasts
	}
	// The median within 50ms (or within 50ms of the healthy median, on a
	// machine so loaded that healthy answers are slower), every answer
	// within 500ms, half of a 1s scrape timeout: waiting for Redis would
	// cost a second. The slowest answers pay for the load (the race
	// detector, parallel tests, other work).
	hMedian, _ := percentiles(healthy)
	median, slowest := percentiles(frozen)
	t.Logf("Redis frozen: store_up 0 after %v; %d answers of /metrics and /readyz: median %v (healthy: %v), slowest %v",
		time.Since(frozenAt), len(frozen), median, hMedian, slowest)
	if median > max(50*time.Millisecond, hMedian+50*time.Millisecond) || slowest > 500*time.Millisecond {
		t.Errorf("with Redis frozen, /metrics and /readyz answered in %v (median; healthy %v; bound 50ms), slowest %v (bound 500ms)", median, hMedian, slowest)
	}
}

// answerTimes times n answers each of /metrics and /readyz.
func answerTimes(p *proc, n int) []time.Duration {
	var took []time.Duration
	for range n {
		for _, path := range []string{"/metrics", "/readyz"} {
			began := time.Now()
			p.do("GET", path, "", "")
			took = append(took, time.Since(began))
		}
	}
	return took
}

// percentiles returns the median and the maximum.
func percentiles(took []time.Duration) (median, slowest time.Duration) {
	sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
	return took[len(took)/2], took[len(took)-1]
}
