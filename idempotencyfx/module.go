package idempotencyfx

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/fx"
	"go.uber.org/zap"

	"github.com/redisfx/redisfx/httpfx"
	"github.com/redisfx/redisfx/internal/clientcheck"
	"github.com/redisfx/redisfx/internal/fxconfig"
	"github.com/redisfx/redisfx/streamfx"
)

// Module provides the *Service, puts its ErrorFilter first in httpfx's chain
// and installs the Service in httpfx's router for Idempotent() routes. It
// needs a Redis client (storefx.Module) and a *zap.Logger; the configuration
// is a Config or *Config in the graph, DefaultConfig without one.
var Module = fx.Module("redisfx.idempotency",
	clientcheck.Required("idempotencyfx.Module"),
	fx.Invoke(checkLogger),
	fx.Provide(
		func() ErrorFilter { return DefaultErrorFilter },
		NewFromParams,
		fx.Annotate(registerErrorFilter, fx.ResultTags(`group:"`+httpfx.ErrorFilterGroup+`"`)),
		httpfx.AsContextValue(serviceValue),
	),
)

// registerErrorFilter puts the (possibly decorated) ErrorFilter in httpfx's
// chain, before the application's filters.
func registerErrorFilter(f ErrorFilter) httpfx.RegisteredErrorFilter {
	return httpfx.RegisteredErrorFilter{Name: "idempotency", Order: 10, Filter: httpfx.ErrorFilter(f)}
}

// serviceValue makes the Service reachable from Idempotent() routes, as Install does.
func serviceValue(s *Service) httpfx.ContextValue {
	return httpfx.ContextValue{Key: serviceKey{}, Value: s}
}

// loggerInGraph lets a missing logger get a message naming what to add.
type loggerInGraph struct {
	fx.In
	Log *zap.Logger `optional:"true"`
}

// checkLogger runs before the module's constructors.
func checkLogger(c loggerInGraph) error {
	if c.Log == nil {
		return errors.New("idempotencyfx.Module needs a *zap.Logger: provide one, e.g. fx.Provide(zap.NewProduction)")
	}
	return nil
}

// Params are the inputs of the Service in an Fx app.
type Params struct {
	fx.In
	Lifecycle fx.Lifecycle
	Redis     redis.UniversalClient
	Log       *zap.Logger
	// The app's configuration, in either form (at most one of them).
	Config      *Config               `optional:"true"`
	ConfigValue Config                `optional:"true"`
	Errors      *httpfx.Errors        `optional:"true"`
	Filter      ErrorFilter           `optional:"true"`
	Registerer  prometheus.Registerer `optional:"true"`
	Tracer      trace.TracerProvider  `name:"redisfx.plugin_tracer" optional:"true"`
	Streams     *streamfx.Streams     `optional:"true"` // turns the outbox on (Emit)
}

// NewFromParams builds the Service from the Fx graph and ties it to the
// lifecycle.
func NewFromParams(p Params) (*Service, error) {
	cfg, err := fxconfig.Pick(p.Config, p.ConfigValue)
	if err != nil {
		return nil, fmt.Errorf("idempotencyfx: %w", err)
	}
	errs := p.Errors
	if errs == nil && p.Filter != nil { // no httpfx: a chain of our own filter
		errs = httpfx.NewErrors(p.Log, httpfx.RegisteredErrorFilter{Name: "idempotency", Filter: httpfx.ErrorFilter(p.Filter)})
	}
	s, err := New(p.Redis, cfg, WithLogger(p.Log), WithErrors(errs), WithRegisterer(p.Registerer), WithTracerProvider(p.Tracer), WithStreams(p.Streams))
	if err != nil {
		return nil, err
	}
	p.Lifecycle.Append(fx.StartStopHook(s.Start, s.stop))
	return s, nil
}
