package tracingfx

import (
	"context"
	"encoding/binary"
	"math/rand/v2"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
	"go.opentelemetry.io/otel/trace/noop"
)

// idsOnly is the TracerProvider of the exporter none. Its spans record
// nothing, but each has its own span id, its parent's trace id (or a new
// one) and the sampler's sampled flag: trace ids reach the logs, and a call
// to another service propagates the same traceparent as with an exporter.
type idsOnly struct {
	embedded.TracerProvider
	idsTracer // idsOnly is its own Tracer
	sampler   sdktrace.Sampler
}

// idsTracer holds embedded.Tracer under a name apart from the method Tracer.
type idsTracer struct{ embedded.Tracer }

// Tracer implements trace.TracerProvider.
func (p *idsOnly) Tracer(string, ...trace.TracerOption) trace.Tracer { return p }

// Start implements trace.Tracer: a span that records nothing.
func (p *idsOnly) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	cfg := trace.NewSpanStartConfig(opts...)
	if ctx == nil {
		ctx = context.Background() // as the SDK: a nil context is no parent, not a panic
	}
	s := &idSpan{sc: decide(ctx, name, &cfg, p.sampler), provider: p}
	return trace.ContextWithSpan(ctx, s), s
}

// decide gives a new span its ids and its sampled flag as the SDK's tracer does.
func decide(ctx context.Context, name string, cfg *trace.SpanConfig, sampler sdktrace.Sampler) trace.SpanContext {
	parentCtx := ctx
	if cfg.NewRoot() {
		parentCtx = trace.ContextWithSpanContext(ctx, trace.SpanContext{})
	}
	parent := trace.SpanContextFromContext(parentCtx)
	tid := parent.TraceID()
	if !tid.IsValid() {
		tid = newTraceID()
	}
	res := sampler.ShouldSample(sdktrace.SamplingParameters{ParentContext: parentCtx, TraceID: tid, Name: name,
		Kind: cfg.SpanKind(), Attributes: cfg.Attributes(), Links: cfg.Links()})
	flags := parent.TraceFlags().WithSampled(res.Decision == sdktrace.RecordAndSample)
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: newSpanID(), TraceFlags: flags, TraceState: res.Tracestate})
}

func newTraceID() (tid trace.TraceID) {
	binary.LittleEndian.PutUint64(tid[:8], rand.Uint64())
	binary.LittleEndian.PutUint64(tid[8:], rand.Uint64()|1) // never all zero
	return tid
}

func newSpanID() (sid trace.SpanID) {
	binary.LittleEndian.PutUint64(sid[:], rand.Uint64()|1) // never all zero
	return sid
}

// idSpan is a span that is its SpanContext and nothing else, like the SDK's
// span of a dropped trace. Its TracerProvider is the one that made it, so
// instrumentation that takes its tracer from the current span keeps using
// tracingfx's provider.
type idSpan struct {
	noop.Span
	sc       trace.SpanContext
	provider trace.TracerProvider
}

// SpanContext implements trace.Span.
func (s *idSpan) SpanContext() trace.SpanContext { return s.sc }

// TracerProvider implements trace.Span.
func (s *idSpan) TracerProvider() trace.TracerProvider { return s.provider }
