package tracingfx

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// The exporter none's spans record nothing but decide like the SDK: a root
// is sampled as the sampler says (by trace id), a child keeps its parent's
// trace id and decision, and every span has its own span id.
func TestIDsOnly_SamplesLikeTheSDK(t *testing.T) {
	sampler := sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0.25))
	provider := &idsOnly{sampler: sampler}
	tr := provider.Tracer("t")
	sampled := 0
	const n = 4000
	for i := 0; i < n; i++ {
		ctx, root := tr.Start(context.Background(), "root", trace.WithSpanKind(trace.SpanKindServer))
		sc := root.SpanContext()
		if !sc.IsValid() || root.IsRecording() {
			t.Fatalf("root %v recording=%v", sc, root.IsRecording())
		}
		if root.TracerProvider() != provider {
			// otelhttp's transport, among others, takes its tracer from
			// the current span.
			t.Fatalf("the span names %T as its provider", root.TracerProvider())
		}
		want := sampler.ShouldSample(sdktrace.SamplingParameters{ParentContext: context.Background(), TraceID: sc.TraceID()}).Decision == sdktrace.RecordAndSample
		if sc.IsSampled() != want {
			t.Fatalf("root sampled=%v, the sampler says %v", sc.IsSampled(), want)
		}
		if sc.IsSampled() {
			sampled++
		}
		_, child := tr.Start(ctx, "child")
		cc := child.SpanContext()
		if cc.TraceID() != sc.TraceID() || cc.SpanID() == sc.SpanID() || cc.IsSampled() != sc.IsSampled() {
			t.Fatalf("child %v of %v", cc, sc)
		}
		_, fresh := tr.Start(ctx, "new root", trace.WithNewRoot())
		if fresh.SpanContext().TraceID() == sc.TraceID() {
			t.Fatal("WithNewRoot kept the parent's trace id")
		}
	}
	if sampled < n/8 || sampled > n*3/8 {
		t.Fatalf("%d of %d roots sampled at 25 %%", sampled, n)
	}
}

// Found by an adversary (helper-63): the id-only tracer of the default
// exporter panicked on a nil context, which the SDK takes for no parent,
// and gave a parent holding a trace id but no span id (an application's
// own; no propagator makes one) a new trace id, where the SDK keeps the
// caller's trace. Both must give what the SDK alone gives, on the same
// sampler: the same trace id and the same sampled flag.
func TestIDsOnly_OddParents_AsTheSDK(t *testing.T) {
	for _, sampler := range []sdktrace.Sampler{sdktrace.TraceIDRatioBased(0.5), sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0.5))} {
		ids := (&idsOnly{sampler: sampler}).Tracer("t")
		sdk := sdktrace.NewTracerProvider(sdktrace.WithSampler(sampler))
		ref := sdk.Tracer("t")
		for i := 0; i < 200; i++ {
			tid := newTraceID()
			parent := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid}))
			_, got := ids.Start(parent, "op")
			_, want := ref.Start(parent, "op")
			g, w := got.SpanContext(), want.SpanContext()
			if g.TraceID() != w.TraceID() || g.IsSampled() != w.IsSampled() {
				t.Fatalf("%s, parent with trace id %s only: id-only span trace %s sampled %v; the SDK's trace %s sampled %v",
					sampler.Description(), tid, g.TraceID(), g.IsSampled(), w.TraceID(), w.IsSampled())
			}
		}
		//nolint:staticcheck // SA1012: a nil context is what is tested
		ctx, s := ids.Start(nil, "op")
		if ctx == nil || !s.SpanContext().IsValid() {
			t.Fatalf("%s: Start(nil) gave context %v, span %v", sampler.Description(), ctx, s.SpanContext())
		}
		_ = sdk.Shutdown(context.Background())
	}
}

// On the default sampler, for every kind of parent, the id-only tracer
// must give what the SDK's tracer gives on ParentBased(AlwaysSample()):
// the parent's trace id when it has one, its flags with the sampled bit
// decided alike, and its trace state.
func TestIDsOnly_DecidesAsTheDefaultSampler(t *testing.T) {
	sampler := sdktrace.ParentBased(sdktrace.AlwaysSample())
	provider := &idsOnly{sampler: sampler}
	sdk := sdktrace.NewTracerProvider(sdktrace.WithSampler(sampler))
	defer func() { _ = sdk.Shutdown(context.Background()) }()
	ids, ref := provider.Tracer("t"), sdk.Tracer("t")

	state, err := trace.ParseTraceState("vendor=abc,other=1")
	if err != nil {
		t.Fatal(err)
	}
	tid, sid := newTraceID(), newSpanID()
	parent := func(remote bool, flags trace.TraceFlags, spanID trace.SpanID) context.Context {
		sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: spanID, TraceFlags: flags, TraceState: state, Remote: remote})
		if remote {
			return trace.ContextWithRemoteSpanContext(context.Background(), sc)
		}
		return trace.ContextWithSpanContext(context.Background(), sc)
	}
	cases := map[string]context.Context{
		"no parent":                      context.Background(),
		"remote sampled":                 parent(true, trace.FlagsSampled, sid),
		"remote unsampled":               parent(true, 0, sid),
		"remote sampled, random flag":    parent(true, trace.FlagsSampled|trace.FlagsRandom, sid),
		"remote unsampled, random flag":  parent(true, trace.FlagsRandom, sid),
		"local sampled":                  parent(false, trace.FlagsSampled, sid),
		"local unsampled":                parent(false, 0, sid),
		"trace id only, unsampled flags": parent(false, 0, trace.SpanID{}),
		"trace id only, sampled flags":   parent(true, trace.FlagsSampled, trace.SpanID{}),
	}
	for name, ctx := range cases {
		for _, opts := range [][]trace.SpanStartOption{nil, {trace.WithSpanKind(trace.SpanKindServer)}, {trace.WithNewRoot()}} {
			_, got := ids.Start(ctx, "op", opts...)
			_, want := ref.Start(ctx, "op", opts...)
			g, w := got.SpanContext(), want.SpanContext()
			cfg := trace.NewSpanStartConfig(opts...)
			newTrace := !trace.SpanContextFromContext(ctx).TraceID().IsValid() || cfg.NewRoot()
			if (!newTrace && g.TraceID() != w.TraceID()) || (newTrace && g.TraceID() == tid) {
				t.Errorf("%s %d options: trace %s, the SDK's %s", name, len(opts), g.TraceID(), w.TraceID())
			}
			if g.TraceFlags() != w.TraceFlags() || g.TraceState().String() != w.TraceState().String() || !g.SpanID().IsValid() || g.SpanID() == sid {
				t.Errorf("%s %d options: flags %v state %q span %s; the SDK's flags %v state %q",
					name, len(opts), g.TraceFlags(), g.TraceState(), g.SpanID(), w.TraceFlags(), w.TraceState())
			}
		}
	}
	//nolint:staticcheck // SA1012: a nil context is what is tested
	if _, s := ids.Start(nil, "op"); !s.SpanContext().IsSampled() {
		t.Error("a span without parent (nil context) is not sampled")
	}
}
