package main

import (
	"testing"

	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/redisfx/redisfx/httpfx"
	"github.com/redisfx/redisfx/metricsfx"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The soak reads the series it compares from a server configured as the
// benchmark server is (metricsfx Prefix "bench"): each must be served.
func TestScrape_ReadsEverySampledSeries(t *testing.T) {
	var srv *httpfx.Server
	a := fxtest.New(t, fx.NopLogger, fx.Provide(zap.NewNop),
		fx.Supply(&httpfx.Config{Addr: "127.0.0.1:0"}, &metricsfx.Config{Prefix: "bench"}),
		metricsfx.Module, httpfx.Module, fx.Populate(&srv))
	a.RequireStart()
	defer a.RequireStop()
	m, err := scrape(srv.URL() + httpfx.MetricsPath)
	if err != nil {
		t.Fatal(err)
	}
	if m["go_goroutines"] < 1 || m["process_resident_memory_bytes"] <= 0 {
		t.Errorf("implausible samples: %v", m)
	}
}
