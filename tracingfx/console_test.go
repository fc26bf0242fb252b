package tracingfx

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

func consoleProvider(t *testing.T, cfg Config) (*Provider, *syncBuffer) {
	t.Helper()
	buf := &syncBuffer{}
	cfg.Exporter = ExporterConfig{Type: ExporterConsole, Writer: buf}
	p, err := NewProvider(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Shutdown(context.Background()) })
	return p, buf
}

func TestConsole_OneJSONObjectPerLine(t *testing.T) {
	t.Parallel()
	p, buf := consoleProvider(t, Config{})
	svc := NewTracingService(p.Tracer)
	began := time.Now()
	_ = svc.WithSpan(context.Background(), "outer", func(ctx context.Context) error {
		svc.AddEvent(ctx, "step", map[string]any{"n": 1})
		_ = svc.WithSpan(ctx, "inner", func(context.Context) error { return errors.New("nope") }, ISpanOptions{Kind: KindProducer})
		return nil
	}, ISpanOptions{Kind: KindServer, Attributes: map[string]any{"a": "b"}})
	spans := buf.lines(t)
	if len(spans) != 2 {
		t.Fatalf("%d lines, want 2", len(spans))
	}
	outer, inner := consoleNamed(spans, "outer"), consoleNamed(spans, "inner")
	if outer.Kind != "SERVER" || inner.Kind != "PRODUCER" {
		t.Fatalf("kinds %s %s", outer.Kind, inner.Kind)
	}
	if inner.ParentSpanID != outer.SpanID || inner.TraceID != outer.TraceID || len(outer.TraceID) != 32 || len(outer.SpanID) != 16 {
		t.Fatalf("ids: %+v %+v", outer, inner)
	}
	if outer.Status.Code != "OK" || inner.Status.Code != "ERROR" || inner.Status.Message != "nope" {
		t.Fatalf("status %+v %+v", outer.Status, inner.Status)
	}
	if outer.Attributes["a"] != "b" || outer.Events[0].Name != "step" {
		t.Fatalf("attributes/events %+v", outer)
	}
	// Microseconds since the epoch, and a duration in microseconds.
	if d := outer.Timestamp - began.UnixMicro(); d < 0 || d > int64(time.Second/time.Microsecond) {
		t.Fatalf("timestamp %d is not µs since epoch near %d", outer.Timestamp, began.UnixMicro())
	}
	if outer.Duration < inner.Duration || outer.Duration < 0 {
		t.Fatalf("durations %d %d", outer.Duration, inner.Duration)
	}
}

func TestWithSpan_PanicRecordedAndReraised(t *testing.T) {
	t.Parallel()
	p, buf := consoleProvider(t, Config{})
	svc := NewTracingService(p.Tracer)
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("panic swallowed")
			}
		}()
		_ = svc.WithSpan(context.Background(), "boom", func(context.Context) error { panic("kaput") })
	}()
	s := buf.lines(t)[0]
	if s.Status.Code != "ERROR" || len(s.Events) == 0 || s.Events[0].Name != "exception" {
		t.Fatalf("panic not recorded: %+v", s)
	}
	if st, _ := s.Events[0].Attributes["exception.stacktrace"].(string); !strings.Contains(st, "goroutine") {
		t.Fatal("no stack trace on the exception")
	}
}

func TestGetCurrentSpan(t *testing.T) {
	t.Parallel()
	p, _ := consoleProvider(t, Config{})
	svc := NewTracingService(p.Tracer)
	if svc.GetCurrentSpan(context.Background()) != nil {
		t.Fatal("a span outside any span")
	}
	_ = svc.WithSpan(context.Background(), "x", func(ctx context.Context) error {
		if svc.GetCurrentSpan(ctx) == nil {
			t.Fatal("no current span inside WithSpan")
		}
		return nil
	})
}

func TestSampling_Strategies(t *testing.T) {
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
		name string
		cfg  SamplingConfig
		ctx  context.Context
		want int // spans exported of 200 root spans
		tol  int
	}{
		{"always", SamplingConfig{Strategy: SampleAlways}, context.Background(), 200, 0},
		{"never", SamplingConfig{Strategy: SampleNever}, context.Background(), 0, 0},
		{"ratio 0.25", SamplingConfig{Strategy: SampleRatio, Ratio: 0.25}, context.Background(), 50, 30},
		{"parent sampled", SamplingConfig{Strategy: SampleParent, Ratio: 0.01}, remote(true), 200, 0},
		{"parent not sampled", SamplingConfig{Strategy: SampleParent}, remote(false), 0, 0},
		{"never but keep errors", SamplingConfig{Strategy: SampleNever, KeepErrors: true}, context.Background(), 100, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, buf := consoleProvider(t, Config{Sampling: c.cfg})
			svc := NewTracingService(p.Tracer)
			for i := 0; i < 200; i++ {
				var err error
				if i%2 == 0 {
					err = errors.New("failed")
				}
				_ = svc.WithSpan(c.ctx, "op", func(context.Context) error { return err })
			}
			got := len(buf.lines(t))
			if got < c.want-c.tol || got > c.want+c.tol {
				t.Fatalf("exported %d of 200, want %d±%d", got, c.want, c.tol)
			}
		})
	}
}

func TestSampling_KeepSlowerThan(t *testing.T) {
	t.Parallel()
	p, buf := consoleProvider(t, Config{Sampling: SamplingConfig{Strategy: SampleNever, KeepSlowerThan: 20 * time.Millisecond}})
	tr := p.Tracer.Tracer("t")
	_, fast := tr.Start(context.Background(), "fast")
	fast.End()
	_, slow := tr.Start(context.Background(), "slow", trace.WithTimestamp(time.Now().Add(-time.Second)))
	slow.End()
	lines := buf.lines(t)
	if len(lines) != 1 || lines[0].Name != "slow" {
		t.Fatalf("exported %+v, want only the slow span", lines)
	}
}

func TestConfig_InvalidValuesNameTheOption(t *testing.T) {
	for opt, cfg := range map[string]Config{
		"Exporter.Type":            {Exporter: ExporterConfig{Type: "carrier-pigeon"}},
		"Exporter.Endpoint":        {Exporter: ExporterConfig{Type: ExporterOTLP, Endpoint: "collector:4318"}},
		"Exporter.Headers":         {Exporter: ExporterConfig{Headers: map[string]string{"bad header": "x"}}},
		"Sampling.Strategy":        {Sampling: SamplingConfig{Strategy: "sometimes"}},
		"Sampling.Ratio":           {Sampling: SamplingConfig{Strategy: SampleRatio, Ratio: 1.5}},
		"Spans.MaxArgLength":       {Spans: SpanConfig{MaxArgLength: -1}},
		"Batch.MaxExportBatchSize": {Batch: BatchConfig{MaxQueueSize: 10, MaxExportBatchSize: 20}},
		"ShutdownTimeout":          {ShutdownTimeout: -1},
	} {
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), opt) {
			t.Errorf("%s: err = %v", opt, err)
		}
	}
}

func TestEndpointForms(t *testing.T) {
	for in, want := range map[string]string{
		"http://collector:4318":             "http://collector:4318/v1/traces",
		"http://collector:4318/":            "http://collector:4318/v1/traces",
		"https://tempo.example/otlp/traces": "https://tempo.example/otlp/traces",
		"http://collector:4318/v1/traces":   "http://collector:4318/v1/traces",
	} {
		if got := tracesURL(in); got != want {
			t.Errorf("tracesURL(%q) = %q, want %q", in, got, want)
		}
	}
	if got := logsURL("http://c:4318"); got != "http://c:4318/v1/logs" {
		t.Errorf("logsURL = %q", got)
	}
}
