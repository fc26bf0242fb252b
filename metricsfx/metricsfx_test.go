package metricsfx

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
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
}

func TestInvalidPrefixNamesTheField(t *testing.T) {
	if _, err := New(Config{Prefix: "my-app"}); err == nil || !strings.Contains(err.Error(), "Config.Prefix") {
		t.Fatalf("err = %v", err)
	}
}
