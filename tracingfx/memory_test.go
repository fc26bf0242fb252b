package tracingfx

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// memory is an SDK TracerProvider whose spans go to an in-memory exporter,
// synchronously: a test about spans reads them as the SDK made them.
type memory struct {
	*sdktrace.TracerProvider
	exp *tracetest.InMemoryExporter
}

// newMemory samples every span.
func newMemory(t testing.TB) *memory {
	return newMemoryWith(t, sdktrace.AlwaysSample(), nil)
}

// newMemoryWith uses sampler, and wrap (if not nil) around the processor,
// as the Provider does with the keeper.
func newMemoryWith(t testing.TB, sampler sdktrace.Sampler, wrap func(sdktrace.SpanProcessor) sdktrace.SpanProcessor) *memory {
	t.Helper()
	m := &memory{exp: tracetest.NewInMemoryExporter()}
	proc := sdktrace.NewSimpleSpanProcessor(m.exp)
	if wrap != nil {
		proc = wrap(proc)
	}
	m.TracerProvider = sdktrace.NewTracerProvider(sdktrace.WithSampler(sampler), sdktrace.WithSpanProcessor(proc))
	t.Cleanup(func() { _ = m.Shutdown(context.Background()) })
	return m
}

// memoryFor is newMemoryWith the sampler and keeper that cfg and env
// (nil: none) resolve to.
func memoryFor(t testing.TB, cfg Config, env map[string]string) *memory {
	t.Helper()
	for k, v := range env {
		t.Setenv(k, v)
	}
	s, err := resolve(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return newMemoryWith(t, s.sampler, s.wrapProcessor)
}

// spans are the ended spans, in order of ending.
func (m *memory) spans() tracetest.SpanStubs { return m.exp.GetSpans() }

// named returns the spans called name.
func (m *memory) named(name string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range m.spans() {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// one returns the only span called name, failing t otherwise.
func (m *memory) one(t testing.TB, name string) tracetest.SpanStub {
	t.Helper()
	got := m.named(name)
	if len(got) != 1 {
		t.Fatalf("%d spans named %q, want 1; all: %v", len(got), name, namesOf(m.spans()))
	}
	return got[0]
}

func namesOf(spans tracetest.SpanStubs) []string {
	names := make([]string, 0, len(spans))
	for _, s := range spans {
		names = append(names, s.Name)
	}
	return names
}

// attrsOf is a span's attributes by key.
func attrsOf(s tracetest.SpanStub) map[attribute.Key]attribute.Value {
	m := make(map[attribute.Key]attribute.Value, len(s.Attributes))
	for _, kv := range s.Attributes {
		m[kv.Key] = kv.Value
	}
	return m
}

// mapEnv is a getenv over a map.
