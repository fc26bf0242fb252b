package tracingfx

import (
	"context"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	"go.uber.org/zap"
)

// A service that injects the tracer by name, as applications do.
type payments struct {
	tracer ITracingService
}

type paymentsParams struct {
	fx.In
	Tracer ITracingService `name:"TRACING_SERVICE"`
}

func TestOTLP_NamedInjection_SpansReachBackendOnStop(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t)
	var svc *payments
	app := fxtest.New(t,
		fx.NopLogger,
		fx.Provide(zap.NewNop),
		fx.Supply(&Config{ServiceName: "payments-test", Exporter: ExporterConfig{Type: ExporterOTLP, Endpoint: rc.URL,
			Headers: map[string]string{"authorization": "Bearer <ACCESS_TOKEN>", "x-tenant": "t1"}}}),
		Module,
		fx.Provide(func(p paymentsParams) *payments { return &payments{tracer: p.Tracer} }),
		fx.Populate(&svc),
	)
	app.RequireStart()
	ctx := context.Background()
	boom := errors.New("card declined")
	_ = svc.tracer.WithSpan(ctx, "payment.process", func(ctx context.Context) error {
		svc.tracer.SetAttribute(ctx, "payment.amount", 1250)
		svc.tracer.AddEvent(ctx, "validated", map[string]any{"rule": "luhn"})
		_ = svc.tracer.WithSpan(ctx, "payment.charge", func(ctx context.Context) error { return boom },
			ISpanOptions{Kind: KindInternal})
		return nil
	})
	_, sp := svc.tracer.StartSpan(ctx, "manual")
	sp.SetStatus(StatusOK, "")
	sp.End()
	app.RequireStop() // the batch processor has not exported yet: stop must flush

	spans := rc.got()
	outer, inner, manual := spanNamed(spans, "payment.process"), spanNamed(spans, "payment.charge"), spanNamed(spans, "manual")
	if outer == nil || inner == nil || manual == nil {
		t.Fatalf("spans lost at stop: got %d", len(spans))
	}
	if hexID(inner.ParentSpanId) != hexID(outer.SpanId) || hexID(inner.TraceId) != hexID(outer.TraceId) {
		t.Fatal("nested WithSpan is not a child")
	}
	if outer.Kind != tracepb.Span_SPAN_KIND_CLIENT || inner.Kind != tracepb.Span_SPAN_KIND_INTERNAL {
		t.Fatalf("kinds %v %v, want CLIENT default and INTERNAL", outer.Kind, inner.Kind)
	}
	if outer.Status.Code != tracepb.Status_STATUS_CODE_OK || inner.Status.Code != tracepb.Status_STATUS_CODE_ERROR || inner.Status.Message != "card declined" {
		t.Fatalf("statuses %v / %v %q", outer.Status.Code, inner.Status.Code, inner.Status.Message)
	}
	if len(inner.Events) == 0 || inner.Events[0].Name != "exception" || attrOf(inner.Events[0].Attributes, "exception.message").GetStringValue() != "card declined" {
		t.Fatalf("exception not recorded: %v", inner.Events)
	}
	if attrOf(outer.Attributes, "payment.amount").GetIntValue() != 1250 || outer.Events[0].Name != "validated" {
		t.Fatal("attribute or event missing")
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.paths[0] != "/v1/traces" {
		t.Fatalf("base endpoint posted to %q, want /v1/traces appended", rc.paths[0])
	}
	if rc.headers[0].Get("Authorization") != "Bearer <ACCESS_TOKEN>" || rc.headers[0].Get("X-Tenant") != "t1" {
		t.Fatalf("exporter headers did not reach the backend: %v", rc.headers[0])
	}
	if rc.service[0] != "payments-test" {
		t.Fatalf("service.name = %q", rc.service[0])
	}
}

func TestOTLP_EndpointWithPath_UsedAsGiven(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t)
	p, err := NewProvider(context.Background(), Config{Exporter: ExporterConfig{Type: ExporterJaeger, Endpoint: rc.URL + "/custom/traces"}})
	if err != nil {
		t.Fatal(err)
	}
	_, sp := NewTracingService(p.Tracer).StartSpan(context.Background(), "x")
	sp.End()
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if len(rc.paths) != 1 || rc.paths[0] != "/custom/traces" {
		t.Fatalf("paths %v", rc.paths)
	}
}

// spansDoNotWait records far more spans than p's queue (256) holds. Were
// recording to wait for an export, a span would wait for the backend: the
// exporter's retry pause (5 s) on a dead one, its request timeout (10 s) on
// a hanging one. Spans that never wait take a few ms each even under -race
// on a loaded machine, so the bound is that wait, not a share of the CPU.
func spansDoNotWait(t *testing.T, p *Provider) {
	t.Helper()
	svc := NewTracingService(p.Tracer)
	for i := 0; i < 2000; i++ {
		began := time.Now()
		_ = svc.WithSpan(context.Background(), "work", func(context.Context) error { return nil })
		if took := time.Since(began); took > 2*time.Second {
			t.Fatalf("span %d took %v to record: recording waited for the backend", i, took)
		}
	}
}

func TestOTLP_DeadBackend_NeitherSlowsWorkNorHangsShutdown(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t)
	dead := rc.URL
	rc.Close() // nothing listens there any more
	p, err := NewProvider(context.Background(), Config{
		Exporter: ExporterConfig{Type: ExporterOTLP, Endpoint: dead}, ShutdownTimeout: 500 * time.Millisecond,
		Batch: BatchConfig{ScheduleDelay: 10 * time.Millisecond, MaxQueueSize: 256, MaxExportBatchSize: 64}})
	if err != nil {
		t.Fatal(err)
	}
	spansDoNotWait(t, p)
	began := time.Now()
	_ = p.Shutdown(context.Background())
	if took := time.Since(began); took > 3*time.Second {
		t.Fatalf("shutdown took %v with a dead backend; bound is ShutdownTimeout", took)
	}
}

func TestOTLP_SlowBackend_NeitherSlowsWorkNorHangsShutdown(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select { // answers after 30 s, or when the test ends
		case <-time.After(30 * time.Second):
		case <-release:
		}
	}))
	defer slow.Close()
	defer close(release)
	p, err := NewProvider(context.Background(), Config{
		Exporter: ExporterConfig{Type: ExporterOTLP, Endpoint: slow.URL}, ShutdownTimeout: 500 * time.Millisecond,
		Batch: BatchConfig{ScheduleDelay: 10 * time.Millisecond, MaxQueueSize: 256, MaxExportBatchSize: 64}})
	if err != nil {
		t.Fatal(err)
	}
	spansDoNotWait(t, p)
	began := time.Now()
	_ = p.Shutdown(context.Background())
	if took := time.Since(began); took > 3*time.Second {
		t.Fatalf("shutdown took %v with a hanging backend; bound is ShutdownTimeout", took)
	}
}

func TestOTLP_RejectedCredentials_AreLogged(t *testing.T) {
	rc := newReceiver(t)
	rc.status = 401
	core, logs := observerCore()
	useErrorLogger(zap.New(core), nil)
	otelErrors.every.Reset()
	p, err := NewProvider(context.Background(), Config{Exporter: ExporterConfig{Type: ExporterOTLP, Endpoint: rc.URL,
		Headers: map[string]string{"authorization": "Bearer ACCESS_TOKEN"}}, Batch: BatchConfig{ScheduleDelay: 5 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Shutdown(context.Background()) }()
	_, sp := NewTracingService(p.Tracer).StartSpan(context.Background(), "x")
	sp.End()
	deadline := time.Now().Add(10 * time.Second) // the background export reports through the handler
	for logs.FilterMessageSnippet("opentelemetry").Len() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("a 401 from the backend was not logged")
		}
		time.Sleep(5 * time.Millisecond)
	}
	for _, e := range logs.All() {
		if strings.Contains(e.ContextMap()["error"].(string), "ACCESS_TOKEN") {
			t.Fatal("credentials in the log")
		}
	}
}

// Found by an adversary: unsigned and small integers, and []int64, reached
// the backend as strings ("1250", "[10 20]"), so it could not query them as
// numbers. Decoded from the OTLP request: each keeps its numeric type; an
// unsigned value above the int64 range is its decimal string, not wrapped.
func TestOTLP_IntegerAttributesKeepTheirType(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t)
	p, err := NewProvider(context.Background(), Config{Exporter: ExporterConfig{Type: ExporterOTLP, Endpoint: rc.URL}})
	if err != nil {
		t.Fatal(err)
	}
	_, sp := NewTracingService(p.Tracer).StartSpan(context.Background(), "payment")
	sp.SetAttributes(map[string]any{
		"amount_cents": uint64(1250), "installments": uint8(3), "retries": int16(2), "shard": uint32(7),
		"small": int8(-4), "port": uint16(443), "count": uint(9), "fees": []int64{10, 20}, "huge": uint64(math.MaxUint64),
		// found attacking the fix: a nil pointer whose String has a value
		// receiver panicked; []byte and named integers became strings
		"deadline": (*time.Time)(nil), "raw": []byte("hi"), "cents": cents(1250), "took": 1500 * time.Millisecond,
	})
	sp.End()
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	s := spanNamed(rc.got(), "payment")
	if s == nil {
		t.Fatal("the span did not arrive")
	}
	got := map[string]*commonpb.AnyValue{}
	for _, a := range s.Attributes {
		got[a.Key] = a.Value
	}
	for k, want := range map[string]int64{"amount_cents": 1250, "installments": 3, "retries": 2, "shard": 7, "small": -4, "port": 443, "count": 9} {
		if v, ok := got[k].GetValue().(*commonpb.AnyValue_IntValue); !ok || v.IntValue != want {
			t.Errorf("%s = %v, want the integer %d", k, got[k], want)
		}
	}
	if fees := got["fees"].GetArrayValue().GetValues(); len(fees) != 2 || fees[0].GetIntValue() != 10 || fees[1].GetIntValue() != 20 {
		t.Errorf("fees = %v, want an array of the integers 10 and 20", got["fees"])
	}
	if h := got["huge"].GetStringValue(); h != "18446744073709551615" {
		t.Errorf("huge = %v, want its decimal string", got["huge"])
	}
	if v, ok := got["cents"].GetValue().(*commonpb.AnyValue_IntValue); !ok || v.IntValue != 1250 {
		t.Errorf("cents = %v, want the integer 1250", got["cents"])
	}
	if string(got["raw"].GetBytesValue()) != "hi" {
		t.Errorf("raw = %v, want the bytes", got["raw"])
	}
	if got["deadline"].GetStringValue() != "<nil>" || got["took"].GetStringValue() != "1.5s" {
		t.Errorf("deadline = %v, took = %v, want <nil> and 1.5s", got["deadline"], got["took"])
	}
}

// cents is a named integer without a String method.
type cents int64
