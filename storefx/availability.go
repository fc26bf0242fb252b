package storefx

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// AvailabilityMetric is the name (before the app's prefix) of the store
// availability gauge that the StoreConnectionLost alert reads: 1 when the
// client's Redis answers PING, 0 when it does not.
const AvailabilityMetric = "store_up"

// availability is a collector that pings every registered client when
// Prometheus scrapes, so the gauge is fresh without a background goroutine.
type availability struct {
	reg     *Registry
	desc    *prometheus.Desc
	timeout time.Duration
}

// NewAvailabilityCollector returns the store_up{client} collector of reg.
// Each scrape pings every client, bounded by timeout each.
func NewAvailabilityCollector(reg *Registry, timeout time.Duration) prometheus.Collector {
	return &availability{reg: reg, timeout: timeout, desc: prometheus.NewDesc(AvailabilityMetric,
		"1 when the named Redis client's server answers PING at scrape time, else 0.", []string{"client"}, nil)}
}

// Describe implements prometheus.Collector.
func (a *availability) Describe(ch chan<- *prometheus.Desc) { ch <- a.desc }

// Collect implements prometheus.Collector.
func (a *availability) Collect(ch chan<- prometheus.Metric) {
	for _, name := range a.reg.Names() {
		c := a.reg.Client(name)
		ctx, cancel := context.WithTimeout(context.Background(), a.timeout)
		up := 1.0
		if c.Ping(ctx).Err() != nil {
			up = 0
		}
		cancel()
		ch <- prometheus.MustNewConstMetric(a.desc, prometheus.GaugeValue, up, name)
	}
}
