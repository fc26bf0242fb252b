package ratelimitfx

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/fx"
	"go.uber.org/zap"
)

// Module provides the *Limiter. It needs a Redis client (storefx.Module);
// the configuration is an optional *Config, the logger, the metrics
// registerer (metricsfx) and the plugin tracer (tracingfx) are used when
// present. Routes opt in with limiter.Limit(rule) or limiter.Handler.
var Module = fx.Module("redisfx.ratelimit", fx.Provide(NewFromParams))

// Params are the inputs of the Limiter in an Fx app.
type Params struct {
	fx.In
	Lifecycle  fx.Lifecycle
	Config     *Config               `optional:"true"`
	Redis      redis.UniversalClient `optional:"true"`
	Log        *zap.Logger           `optional:"true"`
	Registerer prometheus.Registerer `optional:"true"`
	Tracer     trace.TracerProvider  `name:"redisfx.plugin_tracer" optional:"true"`
}

// NewFromParams builds the Limiter from the Fx graph.
func NewFromParams(p Params) (*Limiter, error) {
	if p.Redis == nil {
		return nil, errors.New("ratelimitfx.Module needs a Redis client: add storefx.Module to the app")
	}
	var cfg Config
	if p.Config != nil {
		cfg = *p.Config
	}
	l, err := New(p.Redis, cfg, WithRegisterer(p.Registerer), WithTracerProvider(p.Tracer), WithLogger(p.Log))
	if err != nil {
		return nil, err
	}
	p.Lifecycle.Append(fx.StartHook(l.Start))
	return l, nil
}
