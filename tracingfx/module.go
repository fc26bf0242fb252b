package tracingfx

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/contrib/bridges/otelzap"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"go.uber.org/fx"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/redisfx/redisfx/storefx"
)

// Module provides tracing to the app:
//
//   - *Provider, and its trace.TracerProvider, with the service name in the
//     resource, the configured sampler and exporter; flushed and shut down
//     on stop within Config.ShutdownTimeout;
//   - propagation.TextMapPropagator: W3C TraceContext + Baggage;
//   - ITracingService, named TRACING_SERVICE;
//   - the plugin trace.TracerProvider, named redisfx.plugin_tracer (no-op
//     unless Config.PluginTracing);
//   - redis.<COMMAND> spans (unless Config.DisableRedisCommands) and the
//     command metrics (when a prometheus.Registerer is in the graph) on
//     every storefx client.
//
// The configuration is an optional *Config in the graph. The module does
// not provide the *zap.Logger: the app does (see WithLogBridge).
var Module = fx.Module("redisfx.tracing",
	fx.Provide(
		NewFromParams,
		func(p *Provider) trace.TracerProvider { return p.Tracer },
		Propagator,
		fx.Annotate(func(tp trace.TracerProvider) ITracingService { return NewTracingService(tp) },
			fx.ResultTags(`name:"TRACING_SERVICE"`)),
		fx.Annotate(func(p *Provider) trace.TracerProvider {
			if p.cfg.PluginTracing {
				return p.Tracer
			}
			return noop.NewTracerProvider()
		}, fx.ResultTags(`name:"redisfx.plugin_tracer"`)),
		storefx.AsInstrumentation(newInstrumentation),
	),
	fx.Invoke(fx.Annotate(func(log *zap.Logger, p *Provider, reg prometheus.Registerer) error {
		var count func()
		if reg != nil {
			failures := prometheus.NewCounter(prometheus.CounterOpts{Name: "tracing_export_errors_total",
				Help: "Errors reported by the OpenTelemetry SDK: failed or rejected exports, dropped spans."})
			if err := reg.Register(failures); err != nil {
				return err
			}
			count = failures.Inc
		}
		useErrorLogger(log.Named("otel"), count)
		log.Info("tracing configured", zap.String("exporter", p.cfg.Exporter.Type),
			zap.Bool("redis_commands", !p.cfg.DisableRedisCommands), zap.Bool("plugin_tracing", p.cfg.PluginTracing))
		return nil
	}, fx.ParamTags("", "", `optional:"true"`))),
)

// Params are the inputs of the Provider in an Fx app.
type Params struct {
	fx.In
	Lifecycle fx.Lifecycle
	Config    *Config `optional:"true"`
}

// NewFromParams builds the Provider and registers its shutdown.
func NewFromParams(p Params) (*Provider, error) {
	var cfg Config
	if p.Config != nil {
		cfg = *p.Config
	}
	prov, err := NewProvider(context.Background(), cfg)
	if err != nil {
		return nil, err
	}
	p.Lifecycle.Append(fx.StopHook(func(ctx context.Context) error {
		if err := prov.Shutdown(ctx); err != nil {
			// Reported, not returned: a dead trace backend must not turn a
			// clean stop into a failed one.
			if l := otelErrors.log.Load(); l != nil {
				l.Warn("tracing: the final flush did not complete; the last spans may be lost", zap.Error(err))
			}
		}
		return nil
	}))
	return prov, nil
}

type instrumentationParams struct {
	fx.In
	Provider   *Provider
	Registerer prometheus.Registerer `optional:"true"`
}

func newInstrumentation(p instrumentationParams) (storefx.Instrumentation, error) {
	metrics, err := NewCommandMetrics(p.Registerer)
	if err != nil {
		return nil, err
	}
	var tp trace.TracerProvider
	if !p.Provider.cfg.DisableRedisCommands {
		tp = p.Provider.Tracer
	}
	return Instrumentation(tp, p.Provider.cfg.Spans, metrics), nil
}

// WithLogBridge decorates the application's *zap.Logger so that, when the
// exporter sends OTLP, every log record is also exported over OTLP through
// the otelzap bridge (with the trace and span ids of a context passed as a
// zap field). Add it at the root of the app: fx.New(..., tracingfx.WithLogBridge).
var WithLogBridge = fx.Decorate(BridgeLogger)

// BridgeLogger tees log into the OpenTelemetry log pipeline of p, if any.
func BridgeLogger(log *zap.Logger, p *Provider) *zap.Logger {
	if p.Logs == nil {
		return log
	}
	core := otelzap.NewCore("github.com/redisfx/redisfx", otelzap.WithLoggerProvider(p.Logs))
	return log.WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core { return zapcore.NewTee(c, core) }))
}
