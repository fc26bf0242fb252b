package storefx_test

import (
	"context"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"

	"github.com/redisfx/redisfx/internal/faultproxy"
	"github.com/redisfx/redisfx/internal/redistest"
	"github.com/redisfx/redisfx/storefx"
)

// Bounds of a scrape of store_up and of a readiness check whatever Redis
// does (they read the background check's last result): the median within
// 50ms, every one within 500ms. Waiting for the PING would cost the check's
// timeout, a second here; the slowest answers on a loaded machine (the race
// detector, parallel tests, other work) are the margin between the two.
const (
	medianBound  = 50 * time.Millisecond
	slowestBound = 500 * time.Millisecond
)

// assertFast checks answer times against the bounds.
func assertFast(t *testing.T, what string, took []time.Duration) {
	t.Helper()
	sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
	median, slowest := took[len(took)/2], took[len(took)-1]
	t.Logf("%s: %d answers, median %v, slowest %v", what, len(took), median, slowest)
	if median > medianBound || slowest > slowestBound {
		t.Errorf("%s: median %v (bound %v), slowest %v (bound %v)", what, median, medianBound, slowest, slowestBound)
	}
}

// storeUp gathers store_up{client="default"} and how long the gather took.
func storeUp(t *testing.T, reg *prometheus.Registry) (float64, time.Duration) {
	t.Helper()
	began := time.Now()
	mfs, err := reg.Gather()
	took := time.Since(began)
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == storefx.AvailabilityMetric {
			return mf.Metric[0].GetGauge().GetValue(), took
		}
	}
	t.Fatal("store_up not exported")
	return -1, took
}

// A frozen connection (the proxy holds every byte) and a paused server
// (CLIENT PAUSE ALL) both stop PING from answering. Scrapes and readiness
// checks still answer at once (see the bounds above), store_up turns 0
// within one check interval plus its timeout, and 1 again when Redis
// answers.
func TestStoreUp_FrozenOrPausedServer_ScrapeAndReadyAnswerAtOnce(t *testing.T) {
	t.Parallel()
	const interval, timeout = 100 * time.Millisecond, time.Second
	for _, fault := range []string{"freeze", "client pause"} {
		t.Run(fault, func(t *testing.T) {
			t.Parallel()
			srv := redistest.StartPrivate(t)
			proxy := faultproxy.Start(t, srv.Addr())
			reg := prometheus.NewRegistry()
			var store *storefx.Registry
			app := fxtest.New(t, storefx.Module,
				fx.Supply(&storefx.Config{URL: "redis://" + proxy.Addr(), HealthCheckInterval: interval, HealthCheckTimeout: timeout}),
				fx.Provide(func() prometheus.Registerer { return reg }),
				fx.Populate(&store), fx.Invoke(func(*storefx.Client) {}))
			app.RequireStart()
			defer app.RequireStop()
			if up, _ := storeUp(t, reg); up != 1 {
				t.Fatalf("store_up = %v with Redis up", up)
			}
			if err := store.Ready(context.Background()); err != nil {
				t.Fatalf("Ready with Redis up: %v", err)
			}

			faultAt := time.Now()
			thaw := func() {}
			switch fault {
			case "freeze":
				proxy.SetMode(faultproxy.Freeze)
				thaw = func() { proxy.SetMode(faultproxy.Forward) }
			case "client pause":
				srv.Pause(context.Background(), 3*time.Second) // it thaws by itself
			}
			detectBound := interval + timeout + time.Second // one check's period and timeout, plus scheduling margin
			var scrapes, readies []time.Duration
			for up := 1.0; up != 0; {
				var took time.Duration
				up, took = storeUp(t, reg)
				scrapes = append(scrapes, took)
				began := time.Now()
				err := store.Ready(context.Background())
				readies = append(readies, time.Since(began))
				if up == 0 && (err == nil || !strings.Contains(err.Error(), `client "default"`)) {
					t.Fatalf("store_up is 0 but Ready = %v", err)
				}
				if up != 0 && time.Since(faultAt) > detectBound {
					t.Fatalf("store_up still 1 %v after the %s (bound %v)", time.Since(faultAt), fault, detectBound)
				}
				time.Sleep(10 * time.Millisecond) // polling the gauge: the next check is what is awaited
			}
			t.Logf("%s: store_up 0 after %v", fault, time.Since(faultAt))
			assertFast(t, fault+": store_up scrapes", scrapes)
			assertFast(t, fault+": Ready", readies)

			thaw()
			deadline := time.Now().Add(10 * time.Second) // the pause's end or the stalled PING's timeout, then a new connection
			for up, _ := storeUp(t, reg); up != 1; up, _ = storeUp(t, reg) {
				if time.Now().After(deadline) {
					t.Fatal("store_up did not return to 1 after Redis answered again")
				}
				time.Sleep(10 * time.Millisecond)
			}
			if err := store.Ready(context.Background()); err != nil {
				t.Fatalf("Ready after recovery: %v", err)
			}
		})
	}
}

func TestWatch_RefusesWhatItCannotCheck(t *testing.T) {
	t.Parallel()
	reg := storefx.NewRegistry()
	c, err := storefx.New("main", storefx.Config{Addrs: []string{"127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := reg.Add(c); err != nil {
		t.Fatal(err)
	}
	if h := reg.Health("main"); h.Up || h.Err == nil {
		t.Fatalf("an unwatched client is reported %+v, want not up with a reason", h)
	}
	if err := reg.Ready(context.Background()); err == nil || !strings.Contains(err.Error(), `"main"`) {
		t.Fatalf("Ready with an unwatched client: %v", err)
	}
	if _, err := reg.Watch("nope", time.Second, time.Second); err == nil {
		t.Fatal("watching an unknown client succeeded")
	}
	if _, err := reg.Watch("main", 0, time.Second); err == nil {
		t.Fatal("a zero interval was accepted")
	}
	stop, err := reg.Watch("main", time.Hour, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if h := reg.Health("main"); h.Up || h.Checked.IsZero() || h.Err == nil {
		t.Fatalf("nothing listens on port 1, yet health is %+v", h)
	}
	if _, err := reg.Watch("main", time.Second, time.Second); err == nil {
		t.Fatal("a second Watch of one client succeeded")
	}
	stop()
}
