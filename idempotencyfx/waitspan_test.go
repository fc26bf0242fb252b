package idempotencyfx

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// Issue 19, item 5: the idempotency.wait span has a status (OK when the
// wait learnt the first request's fate, ERROR when WaitTimeout ran out) and
// the attributes every plugin span carries.
func TestWaitSpan_StatusAndPluginAttributes(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	e := newEnvAt(t, Config{WaitTimeout: 300 * time.Millisecond}, nil, "", WithTracerProvider(tp))

	wokenByNotification(t, e, "answered")
	g, first := holdFirst(t, e, "slow")
	wantStatus(t, e.post("/payments", "slow", `{}`), 409, CodeInProgress)
	g.open()
	<-first

	var waits []tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		if s.Name == "idempotency.wait" {
			waits = append(waits, s)
		}
	}
	if len(waits) != 2 {
		t.Fatalf("%d idempotency.wait spans, want 2", len(waits))
	}
	for i, want := range []struct {
		status  codes.Code
		outcome Outcome
	}{{codes.Ok, OutcomeWaitedReplay}, {codes.Error, OutcomeInProgress}} {
		s := waits[i]
		if s.SpanKind != trace.SpanKindInternal {
			t.Errorf("span %d: kind %v", i, s.SpanKind)
		}
		if s.Status.Code != want.status {
			t.Errorf("span %d: status %v %q, want %v", i, s.Status.Code, s.Status.Description, want.status)
		}
		attrs := map[attribute.Key]attribute.Value{}
		for _, a := range s.Attributes {
			attrs[a.Key] = a.Value
		}
		for key, value := range map[attribute.Key]string{
			"redisfx.plugin": "idempotency", "db.system": "redis", "db.system.name": "redis",
			"db.operation": "SUBSCRIBE", "db.operation.name": "SUBSCRIBE", AttrOutcome: string(want.outcome),
		} {
			if got := attrs[key].AsString(); got != value {
				t.Errorf("span %d: %s = %q, want %q", i, key, got, value)
			}
		}
		if got := attrs[AttrWaitTimeoutMS].AsInt64(); got != 300 {
			t.Errorf("span %d: %s = %d, want 300", i, AttrWaitTimeoutMS, got)
		}
		if d, ok := attrs["redisfx.duration_ms"]; !ok || d.AsFloat64() <= 0 {
			t.Errorf("span %d: redisfx.duration_ms = %v", i, d.String())
		}
		if got := attrs["redisfx.error"].AsBool(); got != (want.status == codes.Error) {
			t.Errorf("span %d: redisfx.error = %v", i, got)
		}
	}
	if waits[1].EndTime.Sub(waits[1].StartTime) < 300*time.Millisecond {
		t.Errorf("the timed-out wait span lasted %v, less than WaitTimeout", waits[1].EndTime.Sub(waits[1].StartTime))
	}
}
