package metricsfx

import (
	"cmp"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/common/model"
	"go.uber.org/fx"

	"github.com/redisfx/redisfx"
	"github.com/redisfx/redisfx/internal/fxconfig"
)

// DefaultPrefix is the metric prefix when the application chooses none.
const DefaultPrefix = "redisfx"

// Config configures the metrics.
type Config struct {
	// Prefix is put before every metric name, with an underscore
	// (<prefix>_<name>). Default "redisfx".
	Prefix string
	// Registry is the application's registry. Default: a new one with the
	// Go runtime and process collectors under their standard, unprefixed
	// names (go_goroutines, process_cpu_seconds_total), which standard
	// dashboards and alerts read; never the global default registry.
	Registry *prometheus.Registry
}

// Metrics is the application's registry and its prefixed registerer.
type Metrics struct {
	Registry   *prometheus.Registry
	Registerer prometheus.Registerer
	Prefix     string
}

// ValidPrefix reports whether prefix can start a Prometheus metric name
// ([a-zA-Z_][a-zA-Z0-9_]*).
func ValidPrefix(prefix string) bool { return model.LegacyValidation.IsValidLabelName(prefix) }

// Validate reports an invalid field, naming it.
func (c Config) Validate() error {
	if c.Prefix != "" && !ValidPrefix(c.Prefix) {
		return redisfx.NewConfigError("metricsfx", "Config.Prefix",
			fmt.Sprintf("%q is not a Prometheus name ([a-zA-Z_][a-zA-Z0-9_]*)", c.Prefix))
	}
	return nil
}

// New builds the registry and the prefixed registerer.
func New(cfg Config) (*Metrics, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Prefix = cmp.Or(cfg.Prefix, DefaultPrefix)
	reg := cfg.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	return &Metrics{Registry: reg, Registerer: prometheus.WrapRegistererWithPrefix(cfg.Prefix+"_", reg), Prefix: cfg.Prefix}, nil
}

// Module provides *Metrics, the prometheus.Registerer that modules register
// with (prefixed) and the prometheus.Gatherer that httpfx serves at /metrics.
// The configuration is a Config or *Config in the graph (fx.Supply either).
var Module = fx.Module("redisfx.metrics",
	fx.Provide(
		newFromParams,
		func(m *Metrics) prometheus.Registerer { return m.Registerer },
		func(m *Metrics) prometheus.Gatherer { return m.Registry },
	),
)

type params struct {
	fx.In
	Config      *Config `optional:"true"`
	ConfigValue Config  `optional:"true"`
}

func newFromParams(p params) (*Metrics, error) {
	cfg, err := fxconfig.Pick(p.Config, p.ConfigValue)
	if err != nil {
		return nil, fmt.Errorf("metricsfx: %w", err)
	}
	return New(cfg)
}
