package idempotencyfx

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/fx"
	"go.uber.org/zap"

	"github.com/redisfx/redisfx/httpfx"
)

// Module provides the idempotency *Service, registers its error filter
// (ErrorFilter, first in httpfx's chain) and installs the service in
// httpfx's router, so that routes can opt in with Idempotent().
//
// It needs a Redis client (storefx.Module) and a *zap.Logger. The
// configuration is an optional *Config in the graph (else DefaultConfig).
var Module = fx.Module("redisfx.idempotency",
	fx.Provide(
		func() ErrorFilter { return DefaultErrorFilter },
		NewFromParams,
		fx.Annotate(func(f ErrorFilter) httpfx.RegisteredErrorFilter {
			return httpfx.RegisteredErrorFilter{Name: "idempotency", Order: 10, Filter: httpfx.ErrorFilter(f)}
		}, fx.ResultTags(`group:"`+httpfx.ErrorFilterGroup+`"`)),
		httpfx.AsMiddleware(func(s *Service) httpfx.Middleware {
			return httpfx.Middleware{Name: "idempotency", Order: 0, Wrap: s.Install}
		}),
	),
)

// Params are the inputs of the Service in an Fx app.
type Params struct {
	fx.In
	Lifecycle fx.Lifecycle
	Config    *Config               `optional:"true"`
	Redis     redis.UniversalClient `optional:"true"`
	Log       *zap.Logger           `optional:"true"`
	Errors    *httpfx.Errors        `optional:"true"`
	Filter    ErrorFilter           `optional:"true"`
	// Registerer receives the idempotency metrics (from metricsfx).
	Registerer prometheus.Registerer `optional:"true"`
	// Tracer opens plugin spans; tracingfx provides it under this name, as
	// a no-op when pluginTracing is off.
	Tracer trace.TracerProvider `name:"redisfx.plugin_tracer" optional:"true"`
}

// NewFromParams builds the Service from the Fx graph and ties it to the
// lifecycle. Missing collaborators are reported by the module to add.
func NewFromParams(p Params) (*Service, error) {
	if p.Redis == nil {
		return nil, errors.New("idempotencyfx.Module needs a Redis client: add storefx.Module to the app")
	}
	if p.Log == nil {
		return nil, errors.New("idempotencyfx.Module needs a *zap.Logger: provide one, e.g. fx.Provide(zap.NewProduction)")
	}
	cfg := DefaultConfig()
	if p.Config != nil {
		cfg = *p.Config
	}
	errs := p.Errors
	if errs == nil && p.Filter != nil { // no httpfx: a chain of our own filter
		errs = httpfx.NewErrors(p.Log, httpfx.RegisteredErrorFilter{Name: "idempotency", Filter: httpfx.ErrorFilter(p.Filter)})
	}
	opts := []Option{WithLogger(p.Log), WithErrors(errs)}
	if p.Registerer != nil {
		opts = append(opts, WithRegisterer(p.Registerer))
	}
	if p.Tracer != nil {
		opts = append(opts, WithTracerProvider(p.Tracer))
	}
	s, err := New(p.Redis, cfg, opts...)
	if err != nil {
		return nil, err
	}
	p.Lifecycle.Append(fx.StartStopHook(s.Start, s.Close))
	return s, nil
}
