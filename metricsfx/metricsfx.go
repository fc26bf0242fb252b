// Package metricsfx provides the application's Prometheus registry and the
// prefixed Registerer that every redisfx module registers its collectors
// with, so that every metric is named <prefix>_<name>.
package metricsfx

import (
	"fmt"
	"regexp"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.uber.org/fx"
)

// DefaultPrefix is the metric prefix when the application chooses none.
const DefaultPrefix = "redisfx"

// Config configures the metrics.
type Config struct {
	// Prefix is put before every metric name, with an underscore: the
	// spec's <metric_prefix>. Default "redisfx".
	Prefix string
	// Registry is the application's registry. Default: a new one with the
	// Go runtime and process collectors (never the global default registry).
	Registry *prometheus.Registry
}

// Metrics is the application's registry and its prefixed registerer.
type Metrics struct {
	Registry   *prometheus.Registry
	Registerer prometheus.Registerer
	Prefix     string
}

var validPrefix = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)

// New builds the registry and the prefixed registerer.
func New(cfg Config) (*Metrics, error) {
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	if !validPrefix.MatchString(cfg.Prefix) {
		return nil, fmt.Errorf("metricsfx: invalid Config.Prefix: %q is not a Prometheus name ([a-zA-Z_][a-zA-Z0-9_]*)", cfg.Prefix)
	}
	reg := cfg.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	return &Metrics{Registry: reg, Registerer: prometheus.WrapRegistererWithPrefix(cfg.Prefix+"_", reg), Prefix: cfg.Prefix}, nil
}

// Module provides *Metrics, the prometheus.Registerer that modules register
// with (prefixed) and the prometheus.Gatherer that httpfx serves at /metrics.
// The configuration is an optional *Config in the graph.
//
// Adding a module's collectors is one line in its constructor:
//
//	reg.MustRegister(myCounter) // reg is the injected prometheus.Registerer
var Module = fx.Module("redisfx.metrics",
	fx.Provide(
		fx.Annotate(func(c *Config) (*Metrics, error) {
			if c == nil {
				return New(Config{})
			}
			return New(*c)
		}, fx.ParamTags(`optional:"true"`)),
		func(m *Metrics) prometheus.Registerer { return m.Registerer },
		func(m *Metrics) prometheus.Gatherer { return m.Registry },
	),
)
