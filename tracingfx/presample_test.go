package tracingfx

import (
	"context"
	"encoding/binary"
	"strconv"
	"testing"

	"go.opentelemetry.io/otel/trace"
)

// ratioKeeps is the SDK's TraceIDRatioBased rule: the trace id's last 8
// bytes, shifted right by one, below ratio × 2^63.
func ratioKeeps(tid []byte, ratio float64) bool {
	return binary.BigEndian.Uint64(tid[8:16])>>1 < uint64(ratio*(1<<63))
}

// Presampling decides before the SDK and lets the SDK start only the spans
// it keeps, with the ids it decided on: over OTLP, exactly the root spans
// whose trace id the ratio keeps arrive, with the trace and span ids the
// caller saw; a dropped span is id-only and names tracingfx's provider.
func TestPresampling_ExportsExactlyTheSampledSpansWithTheirIDs(t *testing.T) {
	t.Parallel()
	const ratio, n = 0.3, 600
	rc := newReceiver(t)
	p, err := newProvider(context.Background(), Config{Exporter: ExporterConfig{Endpoint: rc.URL},
		Sampling: SamplingConfig{Strategy: SampleRatio, Ratio: ratio}}, mapEnv(nil))
	if err != nil {
		t.Fatal(err)
	}
	tr := p.TracerProvider().Tracer("test")
	sampled := map[string]string{} // span name -> trace id + span id
	for i := range n {
		name := "op-" + strconv.Itoa(i)
		_, sp := tr.Start(context.Background(), name)
		sc := sp.SpanContext()
		if !sc.IsValid() {
			t.Fatalf("%s: invalid span context", name)
		}
		tid := sc.TraceID()
		keeps := ratioKeeps(tid[:], ratio)
		if sc.IsSampled() != keeps || sp.IsRecording() != keeps {
			t.Fatalf("%s: sampled %v recording %v, but the ratio keeps %v", name, sc.IsSampled(), sp.IsRecording(), keeps)
		}
		if !keeps && sp.TracerProvider() != p.TracerProvider() {
			t.Fatalf("%s: a dropped span names %T as its provider, not tracingfx's", name, sp.TracerProvider())
		}
		if keeps {
			sampled[name] = sc.TraceID().String() + "/" + sc.SpanID().String()
		}
		sp.End()
	}
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := rc.got()
	if len(got) != len(sampled) || len(sampled) < n/5 {
		t.Fatalf("exported %d spans, sampled %d of %d", len(got), len(sampled), n)
	}
	for _, s := range got {
		if want := sampled[s.Name]; hexID(s.TraceId)+"/"+hexID(s.SpanId) != want {
			t.Fatalf("%s exported as %s/%s, started as %q", s.Name, hexID(s.TraceId), hexID(s.SpanId), want)
		}
	}
}

// Children keep their trace: through tracingfx's tracer they share the
// parent's trace id and decision; through the SDK's own tracer, from a
// context whose ids were preset, they still get a span id of their own.
func TestPresampling_ChildrenGetTheirOwnIDs(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t)
	p, err := newProvider(context.Background(), Config{Exporter: ExporterConfig{Endpoint: rc.URL}}, mapEnv(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Shutdown(context.Background()) }()
	ctx, parent := p.TracerProvider().Tracer("a").Start(context.Background(), "parent")
	_, viaUs := p.TracerProvider().Tracer("b").Start(ctx, "child")
	_, viaSDK := p.Tracer.Tracer("c").Start(ctx, "sdk child")
	seen := map[trace.SpanID]string{}
	for name, sp := range map[string]trace.Span{"parent": parent, "child": viaUs, "sdk child": viaSDK} {
		sc := sp.SpanContext()
		if sc.TraceID() != parent.SpanContext().TraceID() || !sc.IsSampled() {
			t.Fatalf("%s: trace %s sampled %v, parent's trace %s", name, sc.TraceID(), sc.IsSampled(), parent.SpanContext().TraceID())
		}
		if other, dup := seen[sc.SpanID()]; dup {
			t.Fatalf("%s has the span id of %s", name, other)
		}
		seen[sc.SpanID()] = name
	}
}

// A remote parent decides through parent-based sampling exactly as before:
// its trace id and flag are kept, sampled or not.
func TestPresampling_RemoteParentDecides(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t)
	p, err := newProvider(context.Background(), Config{Exporter: ExporterConfig{Endpoint: rc.URL},
		Sampling: SamplingConfig{Strategy: SampleParent, Ratio: 0.5}}, mapEnv(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Shutdown(context.Background()) }()
	for _, flags := range []trace.TraceFlags{0, trace.FlagsSampled} {
		remote := trace.NewSpanContext(trace.SpanContextConfig{TraceID: newTraceID(), SpanID: newSpanID(), TraceFlags: flags, Remote: true})
		_, sp := p.TracerProvider().Tracer("t").Start(trace.ContextWithRemoteSpanContext(context.Background(), remote), "server")
		sc := sp.SpanContext()
		if sc.TraceID() != remote.TraceID() || sc.IsSampled() != remote.IsSampled() || sp.IsRecording() != remote.IsSampled() {
			t.Fatalf("remote sampled %v: got trace %s sampled %v recording %v", remote.IsSampled(), sc.TraceID(), sc.IsSampled(), sp.IsRecording())
		}
		sp.End()
	}
}
