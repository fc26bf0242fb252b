package plugintrace_test

import (
	"context"
	"errors"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"go.uber.org/goleak"

	"github.com/redisfx/redisfx/plugintrace"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func record(t *testing.T) (*tracetest.SpanRecorder, trace.TracerProvider) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return rec, tp
}

func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

func TestSpanCarriesTheCommonAttributes(t *testing.T) {
	rec, tp := record(t)
	_, sp := plugintrace.Start(context.Background(), tp, "locks", "lock.acquire", "SET", attribute.String("redisfx.lock.key", "k"))
	sp.Finish(nil)

	spans := rec.Ended()
	if len(spans) != 1 {
		t.Fatalf("%d spans, want 1", len(spans))
	}
	s := spans[0]
	a := attrs(s)
	for k, want := range map[attribute.Key]string{
		"redisfx.plugin": "locks", "db.system.name": "redis", "db.system": "redis",
		"db.operation.name": "SET", "db.operation": "SET", "redisfx.lock.key": "k",
	} {
		if got := a[k].AsString(); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	if _, ok := a[plugintrace.DurationMS]; !ok {
		t.Error("no redisfx.duration_ms")
	}
	if s.Status().Code != codes.Ok || s.SpanKind() != trace.SpanKindInternal || s.InstrumentationScope().Name != plugintrace.ScopeName {
		t.Errorf("status %v kind %v scope %q", s.Status(), s.SpanKind(), s.InstrumentationScope().Name)
	}
}

// A kind outside the API's range is INTERNAL, as the SDK makes it, not a
// panic.
func TestStartKind_InvalidKindIsInternal(t *testing.T) {
	rec, tp := record(t)
	for _, kind := range []trace.SpanKind{-1, 99} {
		_, sp := plugintrace.StartKind(context.Background(), tp, kind, "streams", "stream.publish", "")
		sp.Finish(nil)
	}
	if len(rec.Ended()) != 2 {
		t.Fatalf("%d spans of 2", len(rec.Ended()))
	}
	for _, s := range rec.Ended() {
		if s.SpanKind() != trace.SpanKindInternal {
			t.Errorf("kind %v", s.SpanKind())
		}
	}
}

func TestFinishWithAnError(t *testing.T) {
	rec, tp := record(t)
	_, sp := plugintrace.StartKind(context.Background(), tp, trace.SpanKindProducer, "streams", "stream.publish", "")
	sp.Finish(errors.New("boom"))

	s := rec.Ended()[0]
	a := attrs(s)
	if s.Status().Code != codes.Error || s.Status().Description != "boom" || !a[plugintrace.Error].AsBool() {
		t.Fatalf("status %v, redisfx.error %v", s.Status(), a[plugintrace.Error])
	}
	if _, ok := a["db.operation.name"]; ok {
		t.Error("an operation-less span has db.operation.name")
	}
	if s.SpanKind() != trace.SpanKindProducer || len(s.Events()) != 1 || s.Events()[0].Name != "exception" {
		t.Fatalf("kind %v events %v", s.SpanKind(), s.Events())
	}
}

// A span marked failed without a Go error stays failed when it is finished
// with nil (OpenTelemetry lets a later OK replace ERROR).
func TestFailThenFinishNilStaysFailed(t *testing.T) {
	rec, tp := record(t)
	_, sp := plugintrace.Start(context.Background(), tp, "locks", "lock.acquire", "SET")
	sp.Fail(nil, "Failed to acquire lock")
	sp.Finish(nil)
	s := rec.Ended()[0]
	if s.Status().Code != codes.Error || s.Status().Description != "Failed to acquire lock" || !attrs(s)[plugintrace.Error].AsBool() {
		t.Fatalf("status %v, redisfx.error %v", s.Status(), attrs(s)[plugintrace.Error])
	}
}

// An unsampled plugin span is not given attributes: it costs the
// allocations of the SDK's span and context (6), not of building its
// attributes too (8 when they were built before sampling).
func TestUnsampledSpanBuildsNoAttributes(t *testing.T) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	ctx := context.Background()
	key := attribute.String("redisfx.cache.key", "k")
	allocs := testing.AllocsPerRun(100, func() {
		_, sp := plugintrace.Start(ctx, tp, "cache", "cache.get", "GET", key)
		sp.Finish(nil)
	})
	t.Logf("%v allocations per unsampled span", allocs)
	if allocs > 6 {
		t.Fatalf("%v allocations per unsampled span, want at most 6", allocs)
	}
}

func TestWithoutCommandSpans(t *testing.T) {
	ctx := context.Background()
	if plugintrace.CommandSpansSuppressed(ctx) {
		t.Fatal("suppressed by default")
	}
	if !plugintrace.CommandSpansSuppressed(plugintrace.WithoutCommandSpans(ctx)) {
		t.Fatal("not suppressed")
	}
}

// A span that does not record allocates its context, its *Span and the
// call's attribute list, nothing more: not the span kind's start option,
// not the attributes set on a recording span (six allocations before).
func TestStart_UnrecordedSpanAllocatesOnlyItsContextAndSpan(t *testing.T) {
	tp := noop.NewTracerProvider()
	allocs := testing.AllocsPerRun(100, func() {
		_, s := plugintrace.StartKind(context.Background(), tp, trace.SpanKindProducer, "streams", "stream.publish", "XADD", attribute.String("k", "v"))
		s.Finish(nil)
	})
	if allocs > 3 {
		t.Fatalf("%v allocations per unrecorded span", allocs)
	}
}
