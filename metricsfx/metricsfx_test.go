package metricsfx

import (
	"strings"
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
	// Every name starts with the prefix, the Go runtime's and the
	// process's included (METRICS_PREFIX is "the prefix of every metric
	// name" in the payments example's contract).
	runtime := false
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "shop_") {
			t.Errorf("%s has no prefix", mf.GetName())
		}
		runtime = runtime || mf.GetName() == "shop_go_goroutines"
	}
	if !runtime {
		t.Fatal("the Go runtime's metrics are missing")
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
