package ratelimitfx

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/fx"
	"go.uber.org/zap"

	"github.com/redisfx/redisfx/httpfx"

	"github.com/redisfx/redisfx/internal/clientcheck"
	"github.com/redisfx/redisfx/internal/fxconfig"
)

// Module provides the *Limiter and registers its ErrorFilter in httpfx's
// chain (change it with fx.Decorate). It needs a Redis client
// (storefx.Module).
var Module = fx.Module("redisfx.ratelimit",
	clientcheck.Required("ratelimitfx.Module"),
	fx.Provide(
		func() ErrorFilter { return DefaultErrorFilter },
		NewFromParams,
		fx.Annotate(func(f ErrorFilter) httpfx.RegisteredErrorFilter {
			return httpfx.RegisteredErrorFilter{Name: "ratelimit", Order: errorFilterOrder, Filter: httpfx.ErrorFilter(f)}
		}, fx.ResultTags(`group:"`+httpfx.ErrorFilterGroup+`"`)),
	),
)

// Params are the inputs of the Limiter in an Fx app.
type Params struct {
	fx.In
	Lifecycle fx.Lifecycle
	// The app's configuration, in either form (at most one of them).
	Config      *Config `optional:"true"`
	ConfigValue Config  `optional:"true"`
	Redis       redis.UniversalClient
	Log         *zap.Logger           `optional:"true"`
	Registerer  prometheus.Registerer `optional:"true"`
	Tracer      trace.TracerProvider  `name:"redisfx.plugin_tracer" optional:"true"`
	// Errors is httpfx's chain, which holds Filter when httpfx.Module is in
	// the app.
	Errors *httpfx.Errors `optional:"true"`
	// Filter is the (possibly decorated) ErrorFilter; without httpfx the
	// middleware renders refusals through a chain of this filter alone.
	Filter ErrorFilter `optional:"true"`
}

// NewFromParams builds the Limiter from the Fx graph.
func NewFromParams(p Params) (*Limiter, error) {
	cfg, err := fxconfig.Pick(p.Config, p.ConfigValue)
	if err != nil {
		return nil, fmt.Errorf("ratelimitfx: %w", err)
	}
	errs := p.Errors
	if errs == nil && p.Filter != nil { // no httpfx: a chain of our own filter
		errs = httpfx.NewErrors(p.Log, httpfx.RegisteredErrorFilter{Name: "ratelimit", Filter: httpfx.ErrorFilter(p.Filter)})
	}
	l, err := New(p.Redis, cfg, WithRegisterer(p.Registerer), WithTracerProvider(p.Tracer), WithLogger(p.Log), WithErrors(errs))
	if err != nil {
		return nil, err
	}
	p.Lifecycle.Append(fx.StartHook(l.Start))
	return l, nil
}
