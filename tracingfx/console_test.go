package tracingfx

import (
	"context"
	"errors"
	"math"
	"reflect"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
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

// encoding/json refuses NaN and ±Inf, and the console exporter lost every
// span holding one as an attribute (found by an adversary: "json:
// unsupported value: NaN"). They are written as the strings "NaN", "+Inf"
// and "-Inf", alone or in a float array, in span and event attributes;
// finite floats stay numbers.
func TestConsole_NonFiniteFloatsWritten(t *testing.T) {
	t.Parallel()
	p, buf := consoleProvider(t, Config{})
	svc := NewTracingService(p.Tracer)
	_ = svc.WithSpan(context.Background(), "rate", func(ctx context.Context) error {
		svc.SetAttribute(ctx, "fx.rate", math.NaN())
		svc.AddEvent(ctx, "checked", map[string]any{"headroom": math.Inf(1), "used": 0.25})
		return nil
	})
	_, sp := p.Tracer.Tracer("t").Start(context.Background(), "window")
	sp.SetAttributes(attribute.Float64("low", math.Inf(-1)), attribute.Float64("mean", 1.5),
		attribute.Float64Slice("samples", []float64{1, math.NaN(), math.Inf(1), math.Inf(-1)}),
		attribute.Float64Slice("finite", []float64{0.5, 2}))
	sp.End()
	_ = svc.WithSpan(context.Background(), "ok", func(context.Context) error { return nil })

	spans := buf.lines(t)
	rate, window := consoleNamed(spans, "rate"), consoleNamed(spans, "window")
	if len(spans) != 3 || rate == nil || window == nil || consoleNamed(spans, "ok") == nil {
		t.Fatalf("%d spans written, want rate, window and ok: %+v", len(spans), spans)
	}
	if rate.Attributes["fx.rate"] != "NaN" || len(rate.Events) != 1 ||
		rate.Events[0].Attributes["headroom"] != "+Inf" || rate.Events[0].Attributes["used"] != 0.25 {
		t.Fatalf("rate: %+v", rate)
	}
	want := map[string]any{"low": "-Inf", "mean": 1.5, "samples": []any{1.0, "NaN", "+Inf", "-Inf"}, "finite": []any{0.5, 2.0}}
	for k, v := range want {
		if !reflect.DeepEqual(window.Attributes[k], v) {
			t.Errorf("window attribute %s = %#v, want %#v", k, window.Attributes[k], v)
		}
	}
}

// Found by an adversary attacking the fix above: attribute.Slice and
// attribute.Map values were written as {"Type":…,"Value":…} objects, and a
// non-finite float inside one lost the span and every other span of its
// batch. Nested values are JSON arrays and objects, each element written as
// a value of its own.
func TestConsole_NestedValuesWritten(t *testing.T) {
	t.Parallel()
	p, buf := consoleProvider(t, Config{})
	tracer := p.Tracer.Tracer("t")
	_, sp := tracer.Start(context.Background(), "nested")
	sp.SetAttributes(
		attribute.Slice("mixed", attribute.Float64Value(math.NaN()), attribute.StringValue("x"), attribute.Int64Value(3)),
		attribute.Map("limits", attribute.Float64("max", math.Inf(1)), attribute.Bool("on", true)),
		attribute.ByteSlice("raw", []byte("hi")))
	sp.AddEvent("checked", trace.WithAttributes(attribute.Slice("e", attribute.Float64Value(math.Inf(-1)))))
	sp.End()
	_, ok := tracer.Start(context.Background(), "ok")
	ok.End()

	spans := buf.lines(t)
	nested := consoleNamed(spans, "nested")
	if len(spans) != 2 || nested == nil || consoleNamed(spans, "ok") == nil {
		t.Fatalf("%d spans written, want nested and ok: %+v", len(spans), spans)
	}
	want := map[string]any{
		"mixed":  []any{"NaN", "x", 3.0},
		"limits": map[string]any{"max": "+Inf", "on": true},
		"raw":    "aGk=", // base64, as JSON writes bytes
	}
	for k, v := range want {
		if !reflect.DeepEqual(nested.Attributes[k], v) {
			t.Errorf("attribute %s = %#v, want %#v", k, nested.Attributes[k], v)
		}
	}
	if len(nested.Events) != 1 || !reflect.DeepEqual(nested.Events[0].Attributes["e"], []any{"-Inf"}) {
		t.Errorf("events %+v", nested.Events)
	}
}

// The OTLP exporter carries the non-finite floats themselves: only the
// console writes their names.
func TestOTLP_NonFiniteFloatsUnchanged(t *testing.T) {
	rc := newReceiver(t)
	p, err := NewProvider(context.Background(), Config{Exporter: ExporterConfig{Type: ExporterOTLP, Endpoint: rc.URL}})
	if err != nil {
		t.Fatal(err)
	}
	_, sp := p.Tracer.Tracer("t").Start(context.Background(), "window")
	sp.SetAttributes(attribute.Float64("nan", math.NaN()), attribute.Float64("inf", math.Inf(1)))
	sp.End()
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	s := spanNamed(rc.got(), "window")
	if s == nil {
		t.Fatal("the span was not received")
	}
	got := map[string]float64{}
	for _, a := range s.Attributes {
		got[a.Key] = a.Value.GetDoubleValue()
	}
	if !math.IsNaN(got["nan"]) || !math.IsInf(got["inf"], 1) {
		t.Fatalf("OTLP attributes %v, want NaN and +Inf as doubles", got)
	}
}
