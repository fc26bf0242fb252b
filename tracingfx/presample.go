package tracingfx

import (
	"context"
	"sync/atomic"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
)

// presampling is the TracerProvider of an exporting SDK provider. It asks
// the sampler before the SDK does: a span the sampler drops never enters
// the SDK (an id-only span, as the SDK would make, without its id
// generator's lock, its span start configuration a second time and its
// processor lookup); a span it records is started by the SDK with the ids
// the sampler was asked about, so the SDK's own sampling, which runs again
// on the same parent, trace id, name, kind, attributes and links, decides
// the same. Every sampler tracingfx builds is a function of those.
//
// With ratio sampling at 10 %, nine spans in ten take this short way
// (docs/performance.md has the figures).
type presampling struct {
	embedded.TracerProvider
	sdk     *sdktrace.TracerProvider
	sampler sdktrace.Sampler
}

// Tracer implements trace.TracerProvider.
func (p *presampling) Tracer(name string, opts ...trace.TracerOption) trace.Tracer {
	return &presamplingTracer{sdk: p.sdk.Tracer(name, opts...), provider: p}
}

type presamplingTracer struct {
	embedded.Tracer
	sdk      trace.Tracer
	provider *presampling
}

// Start implements trace.Tracer.
func (t *presamplingTracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	cfg := trace.NewSpanStartConfig(opts...)
	sc, decision := decide(ctx, name, &cfg, t.provider.sampler)
	if decision == sdktrace.Drop {
		return startIDSpan(ctx, sc, t.provider)
	}
	return t.sdk.Start(context.WithValue(ctx, presetIDsKey{}, &presetIDs{trace: sc.TraceID(), span: sc.SpanID()}), name, opts...)
}

// presetIDsKey is the context key of the ids presampling chose for the
// span the SDK is about to start.
type presetIDsKey struct{}

// presetIDs are taken once: the context they travel in becomes the new
// span's context, and a child started from it straight through the SDK's
// own tracer must get ids of its own.
type presetIDs struct {
	trace trace.TraceID
	span  trace.SpanID
	taken atomic.Bool
}

func takePresetIDs(ctx context.Context) *presetIDs {
	if p, ok := ctx.Value(presetIDsKey{}).(*presetIDs); ok && p.taken.CompareAndSwap(false, true) {
		return p
	}
	return nil
}

// presetIDGenerator is the SDK provider's id generator: the ids presampling
// chose, else new random ones.
type presetIDGenerator struct{}

// NewIDs implements sdktrace.IDGenerator.
func (presetIDGenerator) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	if p := takePresetIDs(ctx); p != nil {
		return p.trace, p.span
	}
	return newTraceID(), newSpanID()
}

// NewSpanID implements sdktrace.IDGenerator.
func (presetIDGenerator) NewSpanID(ctx context.Context, traceID trace.TraceID) trace.SpanID {
	if p := takePresetIDs(ctx); p != nil && p.trace == traceID {
		return p.span
	}
	return newSpanID()
}
