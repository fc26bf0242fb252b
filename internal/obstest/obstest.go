// Package obstest captures what the plugins emit, for their tests: spans
// from a real console exporter (tracingfx's JSON lines, decoded) and
// values gathered from a real Prometheus registry.
package obstest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.opentelemetry.io/otel/trace"

	"github.com/redisfx/redisfx/tracingfx"
)

// Spans is a tracingfx console exporter writing into memory.
type Spans struct {
	provider *tracingfx.Provider
	mu       sync.Mutex
	out      bytes.Buffer
}

// NewSpans starts a provider with the console exporter (every span
// sampled); it is shut down when t ends.
func NewSpans(t testing.TB) *Spans {
	t.Helper()
	s := &Spans{}
	p, err := tracingfx.NewProvider(context.Background(), tracingfx.Config{Exporter: tracingfx.ExporterConfig{Type: tracingfx.ExporterConsole, Writer: s}})
	if err != nil {
		t.Fatal(err)
	}
	s.provider = p
	t.Cleanup(func() { _ = p.Shutdown(context.Background()) })
	return s
}

// Write receives the exporter's lines.
func (s *Spans) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.out.Write(p)
}

// Tracer is the provider to hand to the module under test.
func (s *Spans) Tracer() trace.TracerProvider { return s.provider.Tracer }

// All decodes every span ended so far, in order of ending.
func (s *Spans) All(t testing.TB) []tracingfx.ConsoleSpan {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var spans []tracingfx.ConsoleSpan
	sc := bufio.NewScanner(bytes.NewReader(s.out.Bytes()))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var sp tracingfx.ConsoleSpan
		if err := json.Unmarshal(sc.Bytes(), &sp); err != nil {
			t.Fatalf("console line %q: %v", sc.Text(), err)
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
