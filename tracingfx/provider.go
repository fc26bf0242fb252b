package tracingfx

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlplog/otlploghttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	sdklog "go.opentelemetry.io/otel/sdk/log"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
)

// Provider owns the SDK pieces: the TracerProvider, and the LoggerProvider
// of the log bridge when the exporter is OTLP.
type Provider struct {
	cfg    Config
	Tracer *sdktrace.TracerProvider
	// Logs is nil unless the exporter sends OTLP.
	Logs *sdklog.LoggerProvider
}

// NewProvider builds the TracerProvider for cfg without Fx. Call Shutdown
// when done.
func NewProvider(ctx context.Context, cfg Config) (*Provider, error) {
	cfg, err := cfg.normalize()
	if err != nil {
		return nil, err
	}
	res, err := newResource(ctx, cfg.ServiceName)
	if err != nil {
		return nil, err
	}
	opts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res)}
	if s := sampler(cfg.Sampling); s != nil {
		opts = append(opts, sdktrace.WithSampler(s))
	}
	p := &Provider{cfg: cfg}
	var proc sdktrace.SpanProcessor
	switch cfg.Exporter.Type {
	case ExporterConsole:
		w := cfg.Exporter.Writer
		if w == nil {
			w = os.Stdout
		}
		proc = sdktrace.NewSimpleSpanProcessor(NewConsoleExporter(w))
	case ExporterOTLP, ExporterJaeger, ExporterZipkin:
		exp, err := otlptracehttp.New(ctx, otlpTraceOptions(cfg.Exporter)...)
		if err != nil {
			return nil, fmt.Errorf("tracingfx: OTLP exporter: %w", err)
		}
		proc = sdktrace.NewBatchSpanProcessor(exp, batchOptions(cfg.Batch)...)
		logExp, err := otlploghttp.New(ctx, otlpLogOptions(cfg.Exporter)...)
		if err != nil {
			return nil, fmt.Errorf("tracingfx: OTLP log exporter: %w", err)
		}
		p.Logs = sdklog.NewLoggerProvider(sdklog.WithResource(res), sdklog.WithProcessor(sdklog.NewBatchProcessor(logExp)))
	}
	if proc != nil {
		if keeps(cfg.Sampling) {
			proc = &keeper{SpanProcessor: proc, errors: cfg.Sampling.KeepErrors, slower: cfg.Sampling.KeepSlowerThan}
		}
		opts = append(opts, sdktrace.WithSpanProcessor(proc))
	}
	p.Tracer = sdktrace.NewTracerProvider(opts...)
	return p, nil
}

// Shutdown flushes and stops the exporters within Config.ShutdownTimeout,
// so that a slow or dead backend never hangs the application's stop. It
// reports spans or logs that could not be delivered in time.
func (p *Provider) Shutdown(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.ShutdownTimeout)
	defer cancel()
	// Traces and logs flush side by side: a hanging traces endpoint must not
	// eat the logs' share of the deadline.
	logsDone := make(chan error, 1)
	go func() {
		if p.Logs == nil {
			logsDone <- nil
			return
		}
		logsDone <- p.Logs.Shutdown(ctx)
	}()
	err := p.Tracer.Shutdown(ctx)
	return errors.Join(err, <-logsDone)
}

func newResource(ctx context.Context, service string) (*resource.Resource, error) {
	env, err := resource.New(ctx, resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil {
		return nil, fmt.Errorf("tracingfx: resource: %w", err)
	}
	res, err := resource.Merge(resource.Default(), env)
	if err != nil {
		return nil, err
	}
	if service != "" { // the application's setting wins over OTEL_SERVICE_NAME
		return resource.Merge(res, resource.NewSchemaless(semconv.ServiceName(service)))
	}
	return res, nil
}

func otlpTraceOptions(e ExporterConfig) []otlptracehttp.Option {
	var o []otlptracehttp.Option
	if e.Endpoint != "" {
		o = append(o, otlptracehttp.WithEndpointURL(tracesURL(e.Endpoint)))
	}
	if len(e.Headers) > 0 {
		o = append(o, otlptracehttp.WithHeaders(e.Headers))
	}
	return o
}

func otlpLogOptions(e ExporterConfig) []otlploghttp.Option {
	var o []otlploghttp.Option
	if e.Endpoint != "" {
		o = append(o, otlploghttp.WithEndpointURL(logsURL(e.Endpoint)))
	}
	if len(e.Headers) > 0 {
		o = append(o, otlploghttp.WithHeaders(e.Headers))
	}
	return o
}

// batchOptions passes only what is set, so OTEL_BSP_* apply otherwise. The
// SDK's own defaults equal the spec's (2048, 512, 5s, 30s).
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

// sampler maps the strategy; nil leaves the choice to OTEL_TRACES_SAMPLER.
func sampler(s SamplingConfig) sdktrace.Sampler {
	var base sdktrace.Sampler
	switch s.Strategy {
	case "":
		if !keeps(s) {
			return nil
		}
		base = sdktrace.ParentBased(sdktrace.AlwaysSample())
	case SampleAlways:
		base = sdktrace.AlwaysSample()
	case SampleNever:
		base = sdktrace.NeverSample()
	case SampleRatio:
		base = sdktrace.TraceIDRatioBased(s.Ratio)
	case SampleParent:
		root := sdktrace.AlwaysSample()
		if s.Ratio > 0 {
			root = sdktrace.TraceIDRatioBased(s.Ratio)
		}
		base = sdktrace.ParentBased(root)
	}
	if keeps(s) {
		return recordAll{base}
	}
	return base
}

func keeps(s SamplingConfig) bool { return s.KeepErrors || s.KeepSlowerThan > 0 }

// recordAll records the spans its inner sampler drops, without sampling
// them, so that keeper can still export the errors and slow ones at their end.
type recordAll struct{ inner sdktrace.Sampler }

// ShouldSample implements sdktrace.Sampler.
func (r recordAll) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	res := r.inner.ShouldSample(p)
	if res.Decision == sdktrace.Drop {
		res.Decision = sdktrace.RecordOnly
	}
	return res
}

// Description implements sdktrace.Sampler.
func (r recordAll) Description() string { return "RecordAll{" + r.inner.Description() + "}" }

// keeper passes sampled spans on, and unsampled ones only if they ended in
// error or were slow.
type keeper struct {
	sdktrace.SpanProcessor
	errors bool
	slower time.Duration
}

// OnEnd implements sdktrace.SpanProcessor.
func (k *keeper) OnEnd(s sdktrace.ReadOnlySpan) {
	if s.SpanContext().IsSampled() {
		k.SpanProcessor.OnEnd(s)
		return
	}
	if (k.errors && s.Status().Code == codes.Error) || (k.slower > 0 && s.EndTime().Sub(s.StartTime()) > k.slower) {
		k.SpanProcessor.OnEnd(kept{s})
	}
}

// kept presents an unsampled span as sampled, so the processor exports it.
type kept struct{ sdktrace.ReadOnlySpan }

// SpanContext implements sdktrace.ReadOnlySpan: the span as exported.
func (k kept) SpanContext() trace.SpanContext {
	sc := k.ReadOnlySpan.SpanContext()
	return sc.WithTraceFlags(sc.TraceFlags().WithSampled(true))
}

// Propagator is W3C TraceContext plus Baggage.
func Propagator() propagation.TextMapPropagator {
	return propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
}
