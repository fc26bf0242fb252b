package tracingfx

import (
	"context"
	"errors"
	"testing"
	"time"
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
