package cachefx

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/fx"
)

// Module provides the *Cache. It needs a Redis client (storefx.Module);
// the configuration is an optional *Config, the metrics registerer
// (metricsfx) and the plugin tracer (tracingfx) are used when present.
// With the first layer on, the invalidation subscription starts and stops
// with the app.
var Module = fx.Module("redisfx.cache", fx.Provide(NewFromParams))

// Params are the inputs of the Cache in an Fx app.
type Params struct {
	fx.In
	Lifecycle  fx.Lifecycle
	Config     *Config               `optional:"true"`
	Redis      redis.UniversalClient `optional:"true"`
	Registerer prometheus.Registerer `optional:"true"`
	Tracer     trace.TracerProvider  `name:"redisfx.plugin_tracer" optional:"true"`
}

// NewFromParams builds the Cache from the Fx graph.
func NewFromParams(p Params) (*Cache, error) {
	if p.Redis == nil {
		return nil, errors.New("cachefx.Module needs a Redis client: add storefx.Module to the app")
	}
	var cfg Config
	if p.Config != nil {
		cfg = *p.Config
	}
	c, err := New(p.Redis, cfg, WithRegisterer(p.Registerer), WithTracerProvider(p.Tracer))
	if err != nil {
		return nil, err
	}
	p.Lifecycle.Append(fx.StartStopHook(c.Start, c.Close))
	return c, nil
}
