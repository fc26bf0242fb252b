// Package plugin is what the plugin modules (cachefx, lockfx, ratelimitfx,
// streamfx) share: their optional collaborators and their Fx inputs.
package plugin

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"go.uber.org/fx"
	"go.uber.org/zap"

	"github.com/redisfx/redisfx/internal/fxconfig"
)

// Options are the optional collaborators of a plugin's New.
type Options struct {
	Registerer prometheus.Registerer // nil: the metrics are registered nowhere
	Tracer     trace.TracerProvider
	Log        *zap.Logger
}

// Option sets one of Options.
type Option func(*Options)

// WithRegisterer registers the plugin's metrics with reg. A nil reg registers nothing.
func WithRegisterer(reg prometheus.Registerer) Option { return func(o *Options) { o.Registerer = reg } }

// WithTracerProvider opens the plugin's spans with tp (tracingfx's plugin
// tracer: a no-op unless PluginTracing is on).
func WithTracerProvider(tp trace.TracerProvider) Option { return func(o *Options) { o.Tracer = tp } }

// WithLogger logs to log. A nil log is ignored.
func WithLogger(log *zap.Logger) Option { return func(o *Options) { o.Log = log } }

// Apply returns o with opts applied, and a no-op tracer and logger where
// none was given; the logger is named name.
func Apply(name string, o Options, opts ...Option) Options {
	for _, f := range opts {
		f(&o)
	}
	if o.Tracer == nil {
		o.Tracer = noop.NewTracerProvider()
	}
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	o.Log = o.Log.Named(name)
	return o
}

// Register registers cs with reg; a nil reg registers nothing.
func Register(reg prometheus.Registerer, cs ...prometheus.Collector) error {
	if reg == nil {
		return nil
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// In are a plugin's inputs from the Fx graph: a Config C or *C, the Redis
// client, and the logger, registerer and plugin tracer when present.
type In[C any] struct {
	fx.In
	Lifecycle   fx.Lifecycle
	Config      *C `optional:"true"`
	ConfigValue C  `optional:"true"`
	Redis       redis.UniversalClient
	Log         *zap.Logger           `optional:"true"`
	Registerer  prometheus.Registerer `optional:"true"`
	Tracer      trace.TracerProvider  `name:"redisfx.plugin_tracer" optional:"true"`
}

// Pick is the configuration the app supplied (in at most one form), with
// the options of the collaborators present; errors are prefixed with pkg.
func (in In[C]) Pick(pkg string) (C, []Option, error) {
	cfg, err := fxconfig.Pick(in.Config, in.ConfigValue)
	if err != nil {
		return cfg, nil, fmt.Errorf("%s: %w", pkg, err)
	}
	return cfg, []Option{WithRegisterer(in.Registerer), WithTracerProvider(in.Tracer), WithLogger(in.Log)}, nil
}

// Provide provides the T that build (a plugin's New) makes from the graph's
// inputs, started and stopped with the app by hook.
func Provide[C, T any](pkg string, build func(redis.UniversalClient, C, ...Option) (T, error), hook func(T) fx.Hook) fx.Option {
	return fx.Provide(func(in In[C]) (t T, err error) {
		cfg, opts, err := in.Pick(pkg)
		if err == nil {
			t, err = build(in.Redis, cfg, opts...)
		}
		if err == nil {
			in.Lifecycle.Append(hook(t))
		}
		return t, err
	})
}
