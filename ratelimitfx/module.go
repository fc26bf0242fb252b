package ratelimitfx

import (
	"go.uber.org/fx"

	"github.com/redisfx/redisfx/httpfx"
	"github.com/redisfx/redisfx/internal/clientcheck"
	"github.com/redisfx/redisfx/internal/plugin"
)

// Module provides the *Limiter and registers its ErrorFilter in httpfx's
// chain (change it with fx.Decorate). It needs a Redis client
// (storefx.Module).
var Module = fx.Module("redisfx.ratelimit",
	clientcheck.Required("ratelimitfx.Module"),
	fx.Provide(
		func() ErrorFilter { return DefaultErrorFilter },
		newFromGraph,
		fx.Annotate(func(f ErrorFilter) httpfx.RegisteredErrorFilter {
			return httpfx.RegisteredErrorFilter{Name: "ratelimit", Order: errorFilterOrder, Filter: httpfx.ErrorFilter(f)}
		}, fx.ResultTags(`group:"`+httpfx.ErrorFilterGroup+`"`)),
	),
)

func newFromGraph(p struct {
	plugin.In[Config]
	// Errors is httpfx's chain, which holds Filter when httpfx.Module is in
	// the app.
	Errors *httpfx.Errors `optional:"true"`
	// Filter is the (possibly decorated) ErrorFilter; without httpfx the
	// middleware renders refusals through a chain of this filter alone.
	Filter ErrorFilter `optional:"true"`
}) (*Limiter, error) {
	cfg, _, err := p.Pick("ratelimitfx")
	if err != nil {
		return nil, err
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
