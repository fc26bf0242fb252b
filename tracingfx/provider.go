package tracingfx

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"go.opentelemetry.io/otel/exporters/otlp/otlplog/otlploggrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlplog/otlploghttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	sdklog "go.opentelemetry.io/otel/sdk/log"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// settings is a normalized Config with the environment folded in.
type settings struct {
	Config
	disabled bool // OTEL_SDK_DISABLED=true: no spans at all
	sampler  sdktrace.Sampler
	// dropsChildren: the sampler drops every child of a local span that is
	// neither sampled nor recorded, whoever made the span.
	dropsChildren bool
	propagator    propagation.TextMapPropagator
	// traces and logs are the OTLP endpoints; logs.url is "" when the log
	// bridge exports nothing.
	traces, logs        endpoint
	headers, logHeaders map[string]string
	exportLogs          bool               // not with OTEL_LOGS_EXPORTER=none
	resource            *resource.Resource // OTEL_RESOURCE_ATTRIBUTES, OTEL_SERVICE_NAME
	warnings            []string           // accepted, probably mistakes
}

// endpoint is an OTLP URL and where it came from.
type endpoint struct{ url, source string }

// Provider owns the OpenTelemetry SDK pieces of an app: the TracerProvider
// spans go to, the propagator, and the LoggerProvider of the log bridge.
type Provider struct {
	cfg settings
	// Tracer is the SDK TracerProvider that tracingfx built and shuts down.
	// It is nil when the application brings its own (UseTracerProvider) and
	// when OTEL_SDK_DISABLED=true; TracerProvider is never nil. With the
	// exporter none, TracerProvider's spans are id-only and do not pass
	// through it.
	Tracer *sdktrace.TracerProvider
	logs   *logPipeline // nil unless logs are exported
	traces trace.TracerProvider
	net    *netGate    // the exporters' connections and exports, ended at Shutdown
	drops  *dropReport // the spans dropped before export
}

// NewProvider builds the TracerProvider for cfg and the OTEL_* environment
// without Fx. A bad value fails with a *redisfx.ConfigError naming the
// Config field or the variable. Call Shutdown when done.
func NewProvider(ctx context.Context, cfg Config) (*Provider, error) {
	s, err := resolve(ctx, cfg)
	if err != nil {
		return nil, err
	}
	p := &Provider{cfg: s, net: newNetGate(), drops: newDropReport()}
	if s.disabled {
		p.traces = noop.NewTracerProvider()
		return p, nil
	}
	res, err := resource.Merge(resource.Default(), s.resource)
	if err != nil {
		return nil, fmt.Errorf("tracingfx: resource: %w", err)
	}
	if s.ServiceName != "" {
		res, _ = resource.Merge(res, resource.NewSchemaless(semconv.ServiceName(s.ServiceName)))
	}
	res = validResource(res)
	var proc sdktrace.SpanProcessor
	switch s.Exporter.Type {
	case ExporterConsole:
		proc = sdktrace.NewSimpleSpanProcessor(NewConsoleExporter(cmp.Or[io.Writer](s.Exporter.Writer, os.Stdout)))
	case ExporterOTLP, ExporterJaeger, ExporterZipkin:
		if proc, err = p.otlp(ctx, res); err != nil {
			return nil, err
		}
	}
	p.Tracer = sdktrace.NewTracerProvider(sdktrace.WithResource(res), sdktrace.WithSampler(s.sampler))
	p.traces = p.Tracer
	if proc == nil { // the exporter none: spans with ids and nothing recorded
		p.traces = &idsOnly{sampler: s.sampler}
	} else {
		p.Tracer.RegisterSpanProcessor(s.wrapProcessor(proc))
	}
	return p, nil
}

// otlp builds the OTLP span exporter behind its batch processor, and the
// log bridge's exporter, both on the provider's netGate. The exporters
// read their other OTEL_EXPORTER_OTLP_* variables themselves.
func (p *Provider) otlp(ctx context.Context, res *resource.Resource) (sdktrace.SpanProcessor, error) {
	s := p.cfg
	// Over gRPC only the client's TLS check counts: the exporter would only
	// log a bad certificate file.
	c, err := p.net.httpClient("TRACES")
	if err != nil {
		return nil, err
	}
	var exp sdktrace.SpanExporter
	if s.Exporter.Protocol == ProtocolGRPC {
		exp, err = otlptracegrpc.New(ctx, otlptracegrpc.WithEndpointURL(s.traces.url), otlptracegrpc.WithHeaders(s.headers), otlptracegrpc.WithDialOption(p.net.grpcDialer()))
	} else {
		exp, err = otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(s.traces.url), otlptracehttp.WithHeaders(s.headers), otlptracehttp.WithHTTPClient(c))
	}
	if err != nil {
		return nil, fmt.Errorf("tracingfx: OTLP exporter: %w", err)
	}
	if s.exportLogs && s.logs.url != "" {
		var logExp sdklog.Exporter
		if c, err = p.net.httpClient("LOGS"); err == nil && s.Exporter.Protocol == ProtocolGRPC {
			logExp, err = otlploggrpc.New(ctx, otlploggrpc.WithEndpointURL(s.logs.url), otlploggrpc.WithHeaders(s.logHeaders), otlploggrpc.WithDialOption(p.net.grpcDialer()))
		} else if err == nil {
			logExp, err = otlploghttp.New(ctx, otlploghttp.WithEndpointURL(s.logs.url), otlploghttp.WithHeaders(s.logHeaders), otlploghttp.WithHTTPClient(c))
		}
		if err != nil {
			_ = exp.Shutdown(ctx)
			return nil, fmt.Errorf("tracingfx: OTLP log exporter: %w", err)
		}
		p.logs = &logPipeline{res: res, exp: &logExporter{Exporter: logExp, net: p.net}}
	}
	return newDropGate(s.Batch, p.drops, &spanExporter{SpanExporter: exp, net: p.net}), nil
}

// newOwnProvider wraps the application's own TracerProvider (see
// UseTracerProvider): a Config field that only tracingfx's own provider
// would use is an error, not silently ignored.
func newOwnProvider(cfg Config, own trace.TracerProvider) (*Provider, error) {
	unused := []struct {
		field string
		set   bool
	}{
		{"ServiceName", cfg.ServiceName != ""}, {"Exporter.Type", cfg.Exporter.Type != ""},
		{"Exporter.Protocol", cfg.Exporter.Protocol != ""}, {"Exporter.Endpoint", cfg.Exporter.Endpoint != ""},
		{"Exporter.Headers", len(cfg.Exporter.Headers) > 0}, {"Exporter.Writer", cfg.Exporter.Writer != nil},
		{"Sampling", cfg.Sampling != SamplingConfig{}}, {"Batch", cfg.Batch != BatchConfig{}}, {"ShutdownTimeout", cfg.ShutdownTimeout != 0},
	}
	for _, u := range unused {
		if u.set {
			return nil, configError("Config."+u.field, "is set, but the application brings its own TracerProvider (UseTracerProvider), which decides it: configure that provider instead")
		}
	}
	norm, err := cfg.normalize()
	if err != nil {
		return nil, err
	}
	s := settings{Config: norm}
	s.Exporter.Type = "the application's own TracerProvider"
	if err := s.readPropagators(context.Background()); err != nil {
		return nil, err
	}
	return &Provider{cfg: s, traces: own, net: newNetGate(), drops: newDropReport()}, nil
}

// TracerProvider is the provider spans go to: Tracer, the application's
// own (UseTracerProvider), or a no-op provider when OTEL_SDK_DISABLED=true.
func (p *Provider) TracerProvider() trace.TracerProvider { return p.traces }

// LoggerProvider is the LoggerProvider the log bridge exports through: nil
// unless the exporter sends OTLP and OTEL_LOGS_EXPORTER is not none. Built
// on the first call; Shutdown flushes it.
func (p *Provider) LoggerProvider() *sdklog.LoggerProvider {
	if p.logs == nil {
		return nil
	}
	return p.logs.get()
}

// Propagator is the propagator of OTEL_PROPAGATORS, else W3C TraceContext
// and Baggage.
func (p *Provider) Propagator() propagation.TextMapPropagator { return p.cfg.propagator }

// Endpoint is the URL spans are exported to, after Config and the
// environment were applied; "" when the exporter is not OTLP.
func (p *Provider) Endpoint() string {
	switch p.cfg.Exporter.Type {
	case ExporterOTLP, ExporterJaeger, ExporterZipkin:
		if !p.cfg.disabled {
			return p.cfg.traces.url
		}
	}
	return ""
}

// Warnings lists the settings that were accepted but are probably mistakes,
// such as OTEL_EXPORTER_OTLP_ENDPOINT ending in /v1/traces. The module logs
// them at start.
func (p *Provider) Warnings() []string { return append([]string(nil), p.cfg.warnings...) }

// Shutdown flushes and stops the exporters within Config.ShutdownTimeout
// and reports spans or logs not delivered in time. When it returns, the
// exporters' connections are closed and no new one can be made. It leaves
// an application's own TracerProvider alone.
func (p *Provider) Shutdown(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.ShutdownTimeout)
	defer cancel()
	defer p.net.close()
	// Traces and logs flush side by side: a hanging traces endpoint must not
	// eat the logs' share of the deadline.
	logsDone := make(chan error, 1)
	go func() { logsDone <- p.logs.shutdown(ctx) }()
	var err error
	if p.Tracer != nil {
		err = p.Tracer.Shutdown(ctx)
	}
	p.drops.stop() // the processors are shut down: report the last drops
	return errors.Join(err, <-logsDone)
}

// batchOptions passes what is set; the SDK's defaults or its OTEL_BSP_*
// variables apply to the rest.
func batchOptions(b BatchConfig) []sdktrace.BatchSpanProcessorOption {
	var o []sdktrace.BatchSpanProcessorOption
	if b.MaxQueueSize > 0 {
		o = append(o, sdktrace.WithMaxQueueSize(b.MaxQueueSize))
	}
	if b.MaxExportBatchSize > 0 {
		o = append(o, sdktrace.WithMaxExportBatchSize(b.MaxExportBatchSize))
	}
	if b.ScheduleDelay > 0 {
		o = append(o, sdktrace.WithBatchTimeout(b.ScheduleDelay))
	}
	if b.ExportTimeout > 0 {
		o = append(o, sdktrace.WithExportTimeout(b.ExportTimeout))
	}
	return o
}
