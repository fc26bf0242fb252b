package tracingfx

import (
	"context"
	"encoding/hex"
	"fmt"
	"testing"
	"time"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// With an exporter, the spans of unsampled traces are made without the
// SDK (sampleFirst). What reaches the backend must be exactly the spans
// whose context says sampled, under the ids the application saw: a trace
// id decided on by the sampler and then replaced by the SDK would export a
// trace the logs never named, and drop one they did. Checked on real OTLP
// requests, for each way a Config or a parent decides.
func TestSampleFirst_ExportsExactlyTheSampledSpansUnderTheirIDs(t *testing.T) {
	t.Parallel()
	remote := func(sampled bool) context.Context {
		flags := "00"
		if sampled {
			flags = "01"
		}
		carrier := propagation.MapCarrier{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-" + flags}
		return Propagator().Extract(context.Background(), carrier)
	}
	cases := []struct {
		name     string
		sampling SamplingConfig
		parent   context.Context
		ratio    float64 // > 0: the root's decision must be TraceIDRatioBased's on its trace id
	}{
		{"ratio 0.5", SamplingConfig{Strategy: SampleRatio, Ratio: 0.5}, context.Background(), 0.5},
		{"parent-based ratio 0.3, new traces", SamplingConfig{Strategy: SampleParent, Ratio: 0.3}, context.Background(), 0.3},
		{"parent-based, sampled remote parent", SamplingConfig{Strategy: SampleParent, Ratio: 0.01}, remote(true), 0},
		{"parent-based, unsampled remote parent", SamplingConfig{Strategy: SampleParent, Ratio: 1}, remote(false), 0},
		{"always", SamplingConfig{Strategy: SampleAlways}, context.Background(), 0},
		{"never", SamplingConfig{Strategy: SampleNever}, context.Background(), 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			rc := newReceiver(t)
			p, err := NewProvider(context.Background(), Config{
				Exporter: ExporterConfig{Type: ExporterOTLP, Endpoint: rc.URL}, Sampling: c.sampling,
				Batch: BatchConfig{ScheduleDelay: 10 * time.Millisecond}})
			if err != nil {
				t.Fatal(err)
			}
			tr := p.TracerProvider().Tracer("t")
			want := map[string]string{} // span id -> trace id, of the sampled spans
			sampled, unsampled := 0, 0
			for i := 0; i < 300; i++ {
				ctx, root := tr.Start(c.parent, "root")
				_, child := tr.Start(ctx, "child")
				rsc, csc := root.SpanContext(), child.SpanContext()
				if !rsc.IsValid() || !csc.IsValid() || csc.TraceID() != rsc.TraceID() {
					t.Fatalf("root %v, child %v: want valid ids and one trace", rsc, csc)
				}
				if root.IsRecording() != rsc.IsSampled() || csc.IsSampled() != rsc.IsSampled() {
					t.Fatalf("root recording %v sampled %v, child sampled %v: want all alike", root.IsRecording(), rsc.IsSampled(), csc.IsSampled())
				}
				if c.ratio > 0 {
					res := sdktrace.TraceIDRatioBased(c.ratio).ShouldSample(sdktrace.SamplingParameters{TraceID: rsc.TraceID()})
					if (res.Decision == sdktrace.RecordAndSample) != rsc.IsSampled() {
						t.Fatalf("trace %s: sampled %v, but the ratio sampler decides %v on it", rsc.TraceID(), rsc.IsSampled(), res.Decision)
					}
				}
				if root.SpanContext().IsSampled() {
					sampled++
					want[rsc.SpanID().String()] = rsc.TraceID().String()
					want[csc.SpanID().String()] = rsc.TraceID().String()
				} else {
					unsampled++
					if root.TracerProvider() != p.TracerProvider() {
						t.Fatalf("an unsampled span's TracerProvider is %T, want the Provider's", root.TracerProvider())
					}
				}
				child.End()
				root.End()
			}
			if err := p.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for _, s := range rc.got() {
				got[hex.EncodeToString(s.SpanId)] = hex.EncodeToString(s.TraceId)
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("exported %d spans, want the %d sampled ones (%d roots sampled, %d not); first differences: %s",
					len(got), len(want), sampled, unsampled, firstDifferences(got, want))
			}
			if c.ratio > 0 && (sampled == 0 || unsampled == 0) {
				t.Fatalf("%d sampled, %d not, of 300 at ratio %v", sampled, unsampled, c.ratio)
			}
		})
	}
}

func firstDifferences(got, want map[string]string) string {
	var out []string
	for id, tid := range want {
		if got[id] != tid && len(out) < 3 {
			out = append(out, fmt.Sprintf("span %s of trace %s: exported under %q", id, tid, got[id]))
		}
	}
	for id, tid := range got {
		if _, ok := want[id]; !ok && len(out) < 6 {
			out = append(out, fmt.Sprintf("span %s of trace %s exported, not sampled", id, tid))
		}
	}
	return fmt.Sprint(out)
}

// The trace id a sampled new trace was decided on must not leak to a
// later root span started from its context.
func TestSampleFirst_NewRootUnderASampledSpanGetsItsOwnTrace(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t)
	p, err := NewProvider(context.Background(), Config{
		Exporter: ExporterConfig{Type: ExporterOTLP, Endpoint: rc.URL}, Sampling: SamplingConfig{Strategy: SampleAlways}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Shutdown(context.Background()) }()
	tr := p.TracerProvider().Tracer("t")
	ctx, first := tr.Start(context.Background(), "first")
	defer first.End()
	seen := map[trace.TraceID]bool{first.SpanContext().TraceID(): true}
	for i := 0; i < 20; i++ {
		_, s := tr.Start(ctx, "again", trace.WithNewRoot())
		tid := s.SpanContext().TraceID()
		s.End()
		if seen[tid] {
			t.Fatalf("root span %d reused trace id %s", i, tid)
		}
		seen[tid] = true
	}
}
