// Package obstest captures what the plugins emit, for their tests: spans
// from an OpenTelemetry SDK provider with a tracetest.SpanRecorder, in the
// shape of tracingfx's console format (attribute values as JSON decodes
// them: numbers are float64, lists []any), and values gathered from a real
// Prometheus registry.
package obstest

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/redisfx/redisfx/storefx"
	"github.com/redisfx/redisfx/tracingfx"
)

// Spans records every span of its provider (all sampled) as it ends.
type Spans struct {
	provider *sdktrace.TracerProvider
	rec      *tracetest.SpanRecorder
}

// NewSpans starts a provider recording every span; it is shut down when t
// ends.
func NewSpans(t testing.TB) *Spans {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	p := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = p.Shutdown(context.Background()) })
	return &Spans{provider: p, rec: rec}
}

// Tracer is the provider to hand to the module under test.
func (s *Spans) Tracer() trace.TracerProvider { return s.provider }

// All returns every span ended so far, in order of ending, as tracingfx's
// console exporter writes them (so that the tests read what an operator
// reads, and no second copy of the conversion exists).
func (s *Spans) All(t testing.TB) []tracingfx.ConsoleSpan {
	t.Helper()
	var buf bytes.Buffer
	if err := tracingfx.NewConsoleExporter(&buf).ExportSpans(context.Background(), s.rec.Ended()); err != nil {
		t.Fatal(err)
	}
	var spans []tracingfx.ConsoleSpan
	for dec := json.NewDecoder(&buf); dec.More(); {
		var sp tracingfx.ConsoleSpan
		if err := dec.Decode(&sp); err != nil {
			t.Fatal(err)
		}
		spans = append(spans, sp)
	}
	return spans
}

// Named returns the spans called name.
func (s *Spans) Named(t testing.TB, name string) []tracingfx.ConsoleSpan {
	t.Helper()
	var out []tracingfx.ConsoleSpan
	for _, sp := range s.All(t) {
		if sp.Name == name {
			out = append(out, sp)
		}
	}
	return out
}

// EventNames lists a span's events in order.
func EventNames(sp tracingfx.ConsoleSpan) []string {
	names := make([]string, 0, len(sp.Events))
	for _, e := range sp.Events {
		names = append(names, e.Name)
	}
	return names
}

// Value is the value of the series name{labels} in reg: a counter's or
// gauge's value, a histogram's sample count. It fails t when the series is
// missing. labels are name, value pairs.
func Value(t testing.TB, reg prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.Metric {
			if matches(m, labels) {
				switch {
				case m.Counter != nil:
					return m.Counter.GetValue()
				case m.Gauge != nil:
					return m.Gauge.GetValue()
				case m.Histogram != nil:
					return float64(m.Histogram.GetSampleCount())
				}
			}
		}
	}
	t.Fatalf("series %s%v not exported", name, labels)
	return 0
}

func matches(m *dto.Metric, labels []string) bool {
	for i := 0; i+1 < len(labels); i += 2 {
		found := false
		for _, lp := range m.Label {
			if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// TracedStore is a storefx client on url whose Redis commands make spans
// through tracingfx's real command hook, in a provider that records every
// span it ends (sampled by its parent, as in an app). Both end with t.
func TracedStore(t testing.TB, url string) (*storefx.Client, *sdktrace.TracerProvider, *tracetest.SpanRecorder) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	rdb, err := storefx.New("default", storefx.Config{URL: url}, tracingfx.Instrumentation(tp, tracingfx.SpanConfig{}, nil))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb, tp, rec
}
