package tracingfx

import (
	"context"
	"encoding/binary"
	"math/rand/v2"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
)

// idsOnly is the TracerProvider of the exporter none. Nothing can receive a
// span, so its spans record nothing (no attributes, events or timestamps
// are kept), but each has its own span id, the trace id of its parent (or a
// new one), and the sampled flag the configured sampler decides: trace ids
// reach the logs, and a call to another service propagates the same
// traceparent as with an exporter, so that service samples alike.
type idsOnly struct {
	embedded.TracerProvider
	tracer *idsTracer
}

func newIDsOnly(sampler sdktrace.Sampler) *idsOnly {
	return &idsOnly{tracer: &idsTracer{sampler: sampler}}
}

// Tracer implements trace.TracerProvider.
func (p *idsOnly) Tracer(string, ...trace.TracerOption) trace.Tracer { return p.tracer }

type idsTracer struct {
	embedded.Tracer
	sampler sdktrace.Sampler
}

// Start implements trace.Tracer: a span that records nothing.
func (t *idsTracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	cfg := trace.NewSpanStartConfig(opts...)
	parentCtx := ctx
	if cfg.NewRoot() {
		parentCtx = trace.ContextWithSpanContext(ctx, trace.SpanContext{})
	}
	parent := trace.SpanContextFromContext(parentCtx)
	var tid trace.TraceID
	if parent.IsValid() {
		tid = parent.TraceID()
	} else {
		binary.LittleEndian.PutUint64(tid[:8], rand.Uint64())
		binary.LittleEndian.PutUint64(tid[8:], rand.Uint64()|1) // never all zero
	}
	var sid trace.SpanID
	binary.LittleEndian.PutUint64(sid[:], rand.Uint64()|1)
	res := t.sampler.ShouldSample(sdktrace.SamplingParameters{ParentContext: parentCtx, TraceID: tid, Name: name,
		Kind: cfg.SpanKind(), Attributes: cfg.Attributes(), Links: cfg.Links()})
	flags := parent.TraceFlags().WithSampled(res.Decision == sdktrace.RecordAndSample)
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: flags, TraceState: res.Tracestate})
	ctx = trace.ContextWithSpanContext(ctx, sc)
	return ctx, trace.SpanFromContext(ctx)
}
