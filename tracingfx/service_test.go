package tracingfx

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/redisfx/redisfx/plugintrace"
)

func TestWithSpan_StatusFromTheError_NestedSpansAreChildren(t *testing.T) {
	t.Parallel()
	m := newMemory(t)
	svc := NewTracingService(m)
	_ = svc.WithSpan(context.Background(), "outer", func(ctx context.Context) error {
		svc.SetAttribute(ctx, "payment.amount", 1250)
		svc.AddEvent(ctx, "validated", map[string]any{"rule": "luhn"})
		return svc.WithSpan(ctx, "inner", func(context.Context) error { return errors.New("card declined") }, ISpanOptions{Kind: KindInternal})
	})
	outer, inner := m.one(t, "outer"), m.one(t, "inner")
	if inner.Parent.SpanID() != outer.SpanContext.SpanID() || inner.SpanContext.TraceID() != outer.SpanContext.TraceID() {
		t.Fatal("nested WithSpan is not a child")
	}
	if outer.SpanKind != trace.SpanKindClient || inner.SpanKind != trace.SpanKindInternal {
		t.Fatalf("kinds %v %v, want CLIENT by default and INTERNAL", outer.SpanKind, inner.SpanKind)
	}
	if outer.Status.Code != codes.Error || inner.Status.Code != codes.Error || inner.Status.Description != "card declined" {
		t.Fatalf("statuses %v / %v: the error returned through both", outer.Status, inner.Status)
	}
	if a := attrsOf(inner); !a[plugintrace.Error].AsBool() {
		t.Fatalf("a failed span lacks %s: %v", plugintrace.Error, a)
	}
	if len(inner.Events) == 0 || inner.Events[0].Name != "exception" {
		t.Fatalf("exception not recorded: %v", inner.Events)
	}
	if a := attrsOf(outer); a["payment.amount"].AsInt64() != 1250 || outer.Events[0].Name != "validated" {
		t.Fatalf("attribute or event missing: %v %v", a, outer.Events)
	}
}

func TestWithSpan_PanicRecordedAndReraised(t *testing.T) {
	t.Parallel()
	m := newMemory(t)
	svc := NewTracingService(m)
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("panic swallowed")
			}
		}()
		_ = svc.WithSpan(context.Background(), "boom", func(context.Context) error { panic("kaput") })
	}()
	s := m.one(t, "boom")
	if s.Status.Code != codes.Error || len(s.Events) == 0 || s.Events[0].Name != "exception" {
		t.Fatalf("panic not recorded: %+v", s)
	}
	var stack string
	for _, kv := range s.Events[0].Attributes {
		if kv.Key == "exception.stacktrace" {
			stack = kv.Value.AsString()
		}
	}
	if !strings.Contains(stack, "goroutine") {
		t.Fatal("no stack trace on the exception")
	}
}

func TestGetCurrentSpan(t *testing.T) {
	t.Parallel()
	svc := NewTracingService(newMemory(t))
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

// StartSpan used to read only its first option. Every option counts now:
// the last Kind set wins, and attributes of all are set (a later value
// wins for the same key).
func TestStartSpan_EveryOptionCounts(t *testing.T) {
	t.Parallel()
	m := newMemory(t)
	_, sp := NewTracingService(m).StartSpan(context.Background(), "op",
		ISpanOptions{Kind: KindProducer, Attributes: map[string]any{"a": 1, "shared": "first"}},
		ISpanOptions{Attributes: map[string]any{"b": true, "shared": "second"}},
		ISpanOptions{Kind: KindConsumer})
	sp.End()
	s := m.one(t, "op")
	a := attrsOf(s)
	if s.SpanKind != trace.SpanKindConsumer {
		t.Errorf("kind %v, want CONSUMER (the last one set)", s.SpanKind)
	}
	want := map[attribute.Key]attribute.Value{"a": attribute.Int64Value(1), "b": attribute.BoolValue(true), "shared": attribute.StringValue("second")}
	for k, v := range want {
		if a[k] != v {
			t.Errorf("%s = %v, want %v", k, a[k].String(), v.String())
		}
	}
}

// However fn leaves WithSpan (return, error, panic, runtime.Goexit), its
// span ends, with status OK only on a nil return.
func TestWithSpan_EveryExitEndsTheSpanWithItsStatus(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		fn   func(context.Context) error
		want codes.Code
		msg  string
	}{
		{"return nil", func(context.Context) error { return nil }, codes.Ok, ""},
		{"error", func(context.Context) error { return errors.New("declined") }, codes.Error, "declined"},
		{"panic", func(context.Context) error { panic("boom") }, codes.Error, "panic: boom"},
		{"panic with an error", func(context.Context) error { panic(errors.New("bad state")) }, codes.Error, "bad state"},
		{"runtime.Goexit", func(context.Context) error { runtime.Goexit(); return nil }, codes.Error, "runtime.Goexit: the function did not return"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			m := newMemory(t)
			svc := NewTracingService(m)
			done := make(chan any)
			go func() {
				defer func() { done <- recover() }()
				_ = svc.WithSpan(context.Background(), "op", c.fn)
			}()
			p := <-done
			if (p != nil) != strings.HasPrefix(c.name, "panic") {
				t.Fatalf("recovered %v: a panic must reach the caller, nothing else", p)
			}
			s := m.one(t, "op")
			if s.EndTime.IsZero() || s.Status.Code != c.want || s.Status.Description != c.msg {
				t.Fatalf("ended %v, status %v %q; want %v %q", !s.EndTime.IsZero(), s.Status.Code, s.Status.Description, c.want, c.msg)
			}
		})
	}
}
