package tracingfx

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/contrib/bridges/otelzap"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"go.uber.org/fx"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/redisfx/redisfx/internal/fxconfig"
	"github.com/redisfx/redisfx/plugintrace"
	"github.com/redisfx/redisfx/storefx"
)

// Module provides tracing to the app: *Provider and its
// trace.TracerProvider (shut down on stop within Config.ShutdownTimeout),
// the propagation.TextMapPropagator, ITracingService named TRACING_SERVICE,
// the plugin trace.TracerProvider named redisfx.plugin_tracer (no-op unless
// Config.PluginTracing), and redis.<COMMAND> spans and command metrics on
// every storefx client.
//
// The configuration is an optional Config or *Config in the graph, with
// the OTEL_* environment for what it leaves unset. The module needs a
// *zap.Logger, to which it routes OpenTelemetry's internal errors. It sets
// OpenTelemetry's globals only with SetGlobals. Nothing is fx.Private:
// other modules and the app read what it provides.
var Module = fx.Module("redisfx.tracing",
	fx.Provide(
		NewFromParams,
		(*Provider).TracerProvider,
		(*Provider).Propagator,
		fx.Annotate(NewTracingService, fx.As(new(ITracingService)), fx.ResultTags(`name:"`+TracingServiceName+`"`)),
		fx.Annotate(newPluginTracerProvider, fx.ResultTags(`name:"`+plugintrace.TracerProviderName+`"`)),
		storefx.AsInstrumentation(newInstrumentation),
	),
	fx.Invoke(logOTelErrors, logConfiguration),
)

// AppTracerProviderName is the Fx name of the application's own
// TracerProvider, which UseTracerProvider provides.
const AppTracerProviderName = "redisfx.app_tracer_provider"

// UseTracerProvider makes Module use the TracerProvider that constructor
// returns (optionally with an error) instead of building one; tracingfx
// adds its spans and service on it and leaves its exporter, sampler and
// shutdown to the application (a Config field that configures them is a
// start-up error). Provide it with
//
//	fx.New(tracingfx.Module, tracingfx.UseTracerProvider(newTracerProvider), …)
//
// rather than fx.Provide(newTracerProvider), which conflicts with the
// provider the module already gives the app.
func UseTracerProvider(constructor any) fx.Option {
	return fx.Provide(fx.Annotate(constructor, fx.As(new(trace.TracerProvider)),
		fx.ResultTags(`name:"`+AppTracerProviderName+`"`)))
}

// Params are the inputs of the Provider in an Fx app.
type Params struct {
	fx.In
	Lifecycle fx.Lifecycle
	// The app's configuration, in either form (at most one of them).
	Config      *Config `optional:"true"`
	ConfigValue Config  `optional:"true"`
	// Own is the application's own TracerProvider (UseTracerProvider).
	Own trace.TracerProvider `name:"redisfx.app_tracer_provider" optional:"true"`
}

// NewFromParams builds the Provider (or wraps the application's own) and
// registers its shutdown.
func NewFromParams(p Params) (*Provider, error) {
	cfg, err := fxconfig.Pick(p.Config, p.ConfigValue)
	if err != nil {
		return nil, fmt.Errorf("tracingfx: %w", err)
	}
	if p.Own != nil {
		return newOwnProvider(cfg, p.Own)
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

// newPluginTracerProvider is the provider of the plugin spans.
func newPluginTracerProvider(p *Provider) trace.TracerProvider {
	if p.cfg.PluginTracing && p.exports() {
		return p.TracerProvider()
	}
	return noop.NewTracerProvider()
}

// exports reports whether spans can reach anything: not with
// OTEL_SDK_DISABLED, nor with the exporter none. Then command and plugin
// spans are not made at all.
func (p *Provider) exports() bool {
	return !p.cfg.disabled && (p.Tracer == nil || p.cfg.Exporter.Type != ExporterNone)
}

type instrumentationParams struct {
	fx.In
	Provider   *Provider
	Registerer prometheus.Registerer `optional:"true"`
}

func newInstrumentation(p instrumentationParams) (storefx.Instrumentation, error) {
	var metrics *CommandMetrics
	if p.Registerer != nil {
		var err error
		if metrics, err = NewCommandMetrics(p.Registerer); err != nil {
			return nil, err
		}
	}
	var tp trace.TracerProvider
	if !p.Provider.cfg.DisableRedisCommands && p.Provider.exports() {
		tp = p.Provider.TracerProvider()
	}
	return instrumentation(tp, p.Provider.cfg.Spans, metrics, p.Provider.Tracer != nil && p.Provider.cfg.dropsChildren), nil
}

type errorLogParams struct {
	fx.In
	// Log is optional only so that a missing logger gets a message naming
	// what to add.
	Log      *zap.Logger `optional:"true"`
	Provider *Provider
	// Registerer receives tracing_export_errors_total (from metricsfx).
	Registerer prometheus.Registerer `optional:"true"`
}

// logOTelErrors routes OpenTelemetry's process-wide error handler to the
// app's logger (at most a line every 10 s; the last app started wins) and
// counts errors and dropped spans in tracing_export_errors_total when the
// app has a metrics registry.
func logOTelErrors(p errorLogParams) error {
	if p.Log == nil {
		return errors.New("tracingfx.Module needs a *zap.Logger: provide one, e.g. fx.Provide(zap.NewProduction)")
	}
	var count func()
	if p.Registerer != nil {
		failures := prometheus.NewCounter(prometheus.CounterOpts{Name: "tracing_export_errors_total",
			Help: "Failed or rejected span and log exports reported by the OpenTelemetry SDK, and spans dropped before export (batch queue full, or ended during shutdown)."})
		if err := p.Registerer.Register(failures); err != nil {
			return fmt.Errorf("tracingfx: registering tracing_export_errors_total: %w", err)
		}
		count = failures.Inc
	}
	useErrorLogger(p.Log.Named("otel"), count)
	p.Provider.drops.use(p.Log, count)
	return nil
}

// logConfiguration says at start where spans go, after Config and the
// environment were applied. Headers are never logged.
func logConfiguration(log *zap.Logger, p *Provider) {
	s := p.cfg
	fields := []zap.Field{zap.String("exporter", s.Exporter.Type)}
	if s.disabled {
		log.Info("tracing disabled by OTEL_SDK_DISABLED=true: no spans are made")
		return
	}
	if e := p.Endpoint(); e != "" {
		fields = append(fields, zap.String("protocol", s.Exporter.Protocol), zap.String("endpoint", e), zap.String("endpoint_from", s.traces.source))
	}
	sampler := cmp.Or(s.Sampling.Strategy, os.Getenv(envSampler), "parentbased_always_on")
	if s.sampler == nil {
		sampler = "the application's"
	}
	fields = append(fields, zap.String("sampler", sampler), zap.Strings("propagators", s.propagator.Fields()),
		zap.Bool("redis_commands", !s.DisableRedisCommands), zap.Bool("plugin_tracing", s.PluginTracing))
	log.Info("tracing configured", fields...)
	for _, w := range s.warnings {
		log.Warn("tracing: " + w)
	}
}

// WithLogBridge decorates the application's *zap.Logger so that, when the
// exporter sends OTLP, every log record is also exported over OTLP through
// the otelzap bridge (with the trace and span ids of a context passed as a
// zap field). Add it at the root of the app: fx.New(..., tracingfx.WithLogBridge).
var WithLogBridge = fx.Decorate(BridgeLogger)

// BridgeLogger tees log into the OpenTelemetry log pipeline of p, if any,
// at log's level (its sampling does not apply to the bridge). When no logs
// endpoint can be derived from the spans', it says so on log.
func BridgeLogger(log *zap.Logger, p *Provider) *zap.Logger {
	logs := p.LoggerProvider()
	if logs == nil {
		if p.Endpoint() != "" && p.cfg.exportLogs && p.cfg.logs.url == "" {
			log.Warn(fmt.Sprintf("tracing: the log bridge exports nothing: the traces endpoint %s does not end in %s, so the logs endpoint is unknown; set %s",
				p.Endpoint(), tracesPath, envLogsEndpoint))
		}
		return log
	}
	core := otelzap.NewCore(plugintrace.ScopeName, otelzap.WithLoggerProvider(logs))
	return log.WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core {
		return zapcore.NewTee(c, atLevelOf{Core: core, app: c})
	}))
}

// atLevelOf is the bridge's core, enabled only where the application's
// own core is, so records below the app's level are not exported.
type atLevelOf struct {
	zapcore.Core
	app zapcore.LevelEnabler
}

// Enabled implements zapcore.Core.
func (c atLevelOf) Enabled(l zapcore.Level) bool { return c.app.Enabled(l) && c.Core.Enabled(l) }

// With implements zapcore.Core.
func (c atLevelOf) With(fields []zapcore.Field) zapcore.Core {
	return atLevelOf{Core: c.Core.With(fields), app: c.app}
}

// Check implements zapcore.Core.
func (c atLevelOf) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if !c.Enabled(e.Level) {
		return ce
	}
	return ce.AddCore(e, c)
}

// Write implements zapcore.Core. The bridge takes a named logger's name as
// its records' scope, out of the exporter guard's reach: it is made valid
// UTF-8 here, or its batch would be refused.
func (c atLevelOf) Write(e zapcore.Entry, fields []zapcore.Field) error {
	e.LoggerName = validString(e.LoggerName)
	return c.Core.Write(e, fields)
}
