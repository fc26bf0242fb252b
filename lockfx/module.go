package lockfx

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/fx"

	"github.com/redisfx/redisfx/internal/clientcheck"
	"github.com/redisfx/redisfx/internal/fxconfig"
)

// Module provides the *Locker. It needs a Redis client (storefx.Module); a
// Config or *Config, registerer and plugin tracer are used when present.
var Module = fx.Module("redisfx.locks", clientcheck.Required("lockfx.Module"), fx.Provide(NewFromParams))

// Params are the inputs of the Locker in an Fx app.
type Params struct {
	fx.In
	Lifecycle fx.Lifecycle
	// The app's configuration, in either form (at most one of them).
	Config      *Config `optional:"true"`
	ConfigValue Config  `optional:"true"`
	Redis       redis.UniversalClient
	Registerer  prometheus.Registerer `optional:"true"`
	Tracer      trace.TracerProvider  `name:"redisfx.plugin_tracer" optional:"true"`
}

// NewFromParams builds the Locker from the Fx graph.
func NewFromParams(p Params) (*Locker, error) {
	cfg, err := fxconfig.Pick(p.Config, p.ConfigValue)
	if err != nil {
		return nil, fmt.Errorf("lockfx: %w", err)
	}
	l, err := New(p.Redis, cfg, WithRegisterer(p.Registerer), WithTracerProvider(p.Tracer))
	if err != nil {
		return nil, err
	}
	p.Lifecycle.Append(fx.StartStopHook(l.Start, l.Stop))
	return l, nil
}
