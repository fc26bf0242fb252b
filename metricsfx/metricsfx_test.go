package metricsfx

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestPrefixApplied(t *testing.T) {
	m, err := New(Config{Prefix: "shop"})
	if err != nil {
		t.Fatal(err)
	}
	m.Registerer.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "orders_total", Help: "x"}))
	mfs, _ := m.Registry.Gather()
	found := false
	for _, mf := range mfs {
		found = found || mf.GetName() == "shop_orders_total"
	}
	if !found {
		t.Fatal("shop_orders_total not gathered")
	}
	// The Go runtime and process collectors keep their standard names,
	// which standard Go dashboards and alerts read.
	names := map[string]bool{}
	for _, mf := range mfs {
		names[mf.GetName()] = true
	}
	for _, want := range []string{"go_goroutines", "process_cpu_seconds_total"} {
		if !names[want] || names["shop_"+want] {
			t.Errorf("%s: gathered %v, want it unprefixed", want, names[want])
		}
	}
}

func TestInvalidPrefixNamesTheField(t *testing.T) {
	want := `metricsfx: invalid Config.Prefix: "my-app" is not a Prometheus name ([a-zA-Z_][a-zA-Z0-9_]*)`
	if _, err := New(Config{Prefix: "my-app"}); err == nil || err.Error() != want {
		t.Fatalf("err = %v\nwant %s", err, want)
	}
}

func TestModuleTakesTheConfigByValue(t *testing.T) {
	var m *Metrics
	app := fxtest.New(t, fx.NopLogger, Module, fx.Supply(Config{Prefix: "shop"}), fx.Populate(&m))
	app.RequireStart()
	defer app.RequireStop()
	if m.Prefix != "shop" {
		t.Fatalf("prefix %q: a Config supplied by value was ignored", m.Prefix)
	}
}
