package tracingfx

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// heldProcessor keeps what it is handed, like a batch processor whose
// export hangs; its Shutdown waits for release once entered is closed.
type heldProcessor struct {
	mu      sync.Mutex
	got     int
	entered chan struct{}
	release chan struct{}
}

func (h *heldProcessor) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (h *heldProcessor) OnEnd(sdktrace.ReadOnlySpan) {
	h.mu.Lock()
	h.got++
	h.mu.Unlock()
}
func (h *heldProcessor) ForceFlush(context.Context) error { return nil }
func (h *heldProcessor) Shutdown(context.Context) error {
	if h.entered != nil {
		close(h.entered)
		<-h.release
	}
	return nil
}
func (h *heldProcessor) handed() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.got
}

func endedSpan(sampled bool) sdktrace.ReadOnlySpan {
	var flags trace.TraceFlags
	if sampled {
		flags = trace.FlagsSampled
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}, TraceFlags: flags})
	return tracetest.SpanStub{Name: "work", SpanContext: sc}.Snapshot()
}

// The gate hands on at most Batch.MaxQueueSize spans that the exporter has
// not received yet, drops and counts the rest, makes room as the exporter
// receives them, ignores unsampled spans (the batch processor would too),
// and drops the spans that end once shutdown began.
func TestDropGate_QueueBoundAndShutdown(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	var counted int
	drops := newDropReport()
	drops.use(zap.New(core), func() { counted++ })
	next := &heldProcessor{entered: make(chan struct{}), release: make(chan struct{})}
	g := gateOf(next, 2, drops)

	for i := 0; i < 5; i++ {
		g.OnEnd(endedSpan(true))
	}
	g.OnEnd(endedSpan(false))
	if next.handed() != 2 || drops.total.Load() != 3 || counted != 3 {
		t.Fatalf("5 sampled spans, queue 2: handed on %d, dropped %d, counted %d; want 2, 3, 3", next.handed(), drops.total.Load(), counted)
	}
	g.exported(2)
	g.OnEnd(endedSpan(true))
	if next.handed() != 3 || drops.total.Load() != 3 {
		t.Fatalf("after the exporter took 2: handed on %d, dropped %d; want 3, 3", next.handed(), drops.total.Load())
	}

	done := make(chan error)
	go func() { done <- g.Shutdown(context.Background()) }()
	<-next.entered
	g.OnEnd(endedSpan(true))
	close(next.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if next.handed() != 3 || drops.total.Load() != 4 || counted != 4 || drops.late.Load() != 1 {
		t.Fatalf("a span ended during shutdown: handed on %d, dropped %d (late %d), counted %d; want 3, 4 (1), 4",
			next.handed(), drops.total.Load(), drops.late.Load(), counted)
	}
	// One warning (the first drop); the others are within the interval.
	warns := logs.FilterLevelExact(zap.WarnLevel).All()
	if len(warns) != 1 || warns[0].ContextMap()["queue_full"] != int64(1) {
		t.Fatalf("warnings %v, want one at the first drop with queue_full=1", warns)
	}
}

// A backend that hangs while spans keep ending: the spans beyond
// Batch.MaxQueueSize are dropped by tracingfx, each counted in
// tracing_export_errors_total and in Provider.DroppedSpans, with a
// warning; every span is either received by the backend or counted.
func TestDroppedSpans_CountedAndLogged(t *testing.T) {
	rc := &receiver{}
	release := make(chan struct{})
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-release
		rc.serve(w, r)
	}))
	t.Cleanup(backend.Close)
	core, logs := observer.New(zap.InfoLevel)
	reg := prometheus.NewRegistry()
	var svc ITracingService
	var prov *Provider
	app := fxtest.New(t, fx.NopLogger, fx.Supply(zap.New(core)),
		fx.Supply(fx.Annotate(reg, fx.As(new(prometheus.Registerer)))),
		fx.Supply(Config{Exporter: ExporterConfig{Type: ExporterOTLP, Endpoint: backend.URL},
			Batch: BatchConfig{MaxQueueSize: 2, MaxExportBatchSize: 1}}),
		Module,
		fx.Populate(&prov, fx.Annotate(&svc, fx.ParamTags(`name:"TRACING_SERVICE"`))),
	)
	app.RequireStart()
	const spans = 20
	for i := 0; i < spans; i++ {
		_, sp := svc.StartSpan(context.Background(), "work")
		sp.End()
	}
	// At most 2 wait in the queue and 1 hangs in the export.
	dropped := prov.DroppedSpans()
	if dropped < spans-3 {
		t.Fatalf("%d spans ended with the backend hanging and a queue of 2: %d dropped, want at least %d", spans, dropped, spans-3)
	}
	close(release)
	app.RequireStop()
	if got := int64(len(rc.got())); got+dropped != spans {
		t.Fatalf("%d spans: %d received, %d dropped; every span must be one or the other", spans, got, dropped)
	}
	if v := counterValue(t, reg, "tracing_export_errors_total"); v != float64(dropped) {
		t.Fatalf("tracing_export_errors_total = %v, want the %d dropped spans", v, dropped)
	}
	warns := logs.FilterMessageSnippet("spans dropped before export").All()
	if len(warns) != 1 || warns[0].Level != zap.WarnLevel {
		t.Fatalf("warnings about the dropped spans: %v, want one", warns)
	}
}

// The gate's cost on the path of an ended span (the next processor does
// nothing; the exporter side is simulated by releasing every slot).
func BenchmarkDropGate_OnEnd(b *testing.B) {
	g := &dropGate{next: &heldProcessor{}, max: 1 << 30, flushing: make(chan struct{}, flushSlack), drops: newDropReport()}
	s := endedSpan(true)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			g.OnEnd(s)
			g.exported(1)
		}
	})
}

// ForceFlush calls that give up (short contexts) while an export hangs
// leave their markers in the SDK's queue. Those markers must never fill it:
// the SDK would then drop spans the gate handed on, uncounted, and the gate
// would count them as waiting for ever and drop every later span. (Found
// by an adversary: 4 of 5 spans lost uncounted, then 10 of 10 dropped with
// a healthy backend.)
func TestDropGate_AbandonedForceFlushes_NoSpanLostOrStuck(t *testing.T) {
	rc := &receiver{}
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		once.Do(func() { close(entered) })
		<-release
		rc.serve(w, r)
	}))
	t.Cleanup(backend.Close)
	const max = 4
	prov, err := NewProvider(context.Background(), Config{Exporter: ExporterConfig{Type: ExporterOTLP, Endpoint: backend.URL},
		Batch: BatchConfig{MaxQueueSize: max, MaxExportBatchSize: 1, ScheduleDelay: 10 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = prov.Shutdown(context.Background()) })
	tr := prov.Tracer.Tracer("t")
	ended := 0
	end := func() { _, sp := tr.Start(context.Background(), "work"); sp.End(); ended++ }

	end() // taken by the export, which hangs
	<-entered
	for i := 0; i < max+2*flushSlack; i++ { // flushes that give up, one after another
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
		_ = prov.Tracer.ForceFlush(ctx)
		cancel()
	}
	for i := 0; i < max; i++ { // no more than MaxQueueSize wait: none may be dropped
		end()
	}
	close(release) // the backend recovers
	if err := prov.Tracer.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got, dropped := len(rc.got()), prov.DroppedSpans(); int64(got)+dropped != int64(ended) || dropped != 0 {
		t.Fatalf("%d spans ended, %d received, %d counted dropped: want all received", ended, got, dropped)
	}
	before := len(rc.got())
	for i := 0; i < 10; i++ { // healthy, one at a time: all exported
		end()
		if err := prov.Tracer.ForceFlush(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if got := len(rc.got()) - before; got != 10 || prov.DroppedSpans() != 0 {
		t.Fatalf("healthy backend: %d of 10 received, %d dropped", got, prov.DroppedSpans())
	}
}
