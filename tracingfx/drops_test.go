package tracingfx

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
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
	"go.uber.org/zap/zapcore"
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
	// One warning at the first drop; the others are within the interval,
	// so they wait for its end, or for the provider's shutdown (stop).
	warns := logs.FilterLevelExact(zap.WarnLevel).All()
	if len(warns) != 1 || warns[0].ContextMap()["queue_full"] != int64(1) {
		t.Fatalf("warnings %v, want one at the first drop with queue_full=1", warns)
	}
	drops.stop()
	warns = logs.FilterLevelExact(zap.WarnLevel).All()
	if len(warns) != 2 || warns[1].ContextMap()["queue_full"] != int64(2) || warns[1].ContextMap()["ended_during_shutdown"] != int64(1) ||
		warns[1].ContextMap()["dropped_total"] != int64(4) {
		t.Fatalf("warnings %v, want a second at stop with queue_full=2, ended_during_shutdown=1, dropped_total=4", warns)
	}
}

// dropWarnings is a logger keeping its entries in logs and signalling each
// warning about dropped spans on the channel once logs holds it.
func dropWarnings() (*zap.Logger, *observer.ObservedLogs, <-chan struct{}) {
	core, logs := observer.New(zap.InfoLevel)
	logged := make(chan struct{}, 1000)
	return zap.New(core, zap.Hooks(func(e zapcore.Entry) error {
		if strings.Contains(e.Message, "spans dropped before export") {
			logged <- struct{}{}
		}
		return nil
	})), logs, logged
}

// awaitWarning waits for the next warning on logged.
func awaitWarning(t *testing.T, logged <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-logged:
	case <-time.After(10 * time.Second):
		t.Fatalf("no warning %s", what)
	}
}

// warnedDrops sums the counts of the warnings about dropped spans.
func warnedDrops(logs *observer.ObservedLogs) (sum int64) {
	for _, e := range logs.FilterMessageSnippet("spans dropped before export").All() {
		sum += e.ContextMap()["queue_full"].(int64) + e.ContextMap()["ended_during_shutdown"].(int64)
	}
	return sum
}

// The drops within the interval after a warning are warned about when it
// ends, with their counts, not only if another drop comes later (found by
// an adversary: 935 spans dropped, one warning, for 1); stop warns about
// those not warned about yet and leaves no timer behind.
func TestDropReport_WindowDropsWarnedAtItsEnd(t *testing.T) {
	log, logs, logged := dropWarnings()
	r := newDropReport()
	r.interval = 200 * time.Millisecond
	r.use(log, nil)

	r.drop(&r.full)
	awaitWarning(t, logged, "at the first drop")
	for i := 0; i < 4; i++ {
		r.drop(&r.full)
	}
	r.drop(&r.late)
	awaitWarning(t, logged, "at the end of the interval")
	warns := logs.All() // of this logger, only the warnings about drops
	if len(warns) != 2 {
		t.Fatalf("warnings %v, want 2", warns)
	}
	if gap := warns[1].Time.Sub(warns[0].Time); gap < r.interval*9/10 {
		t.Fatalf("the second warning came %v after the first, want the interval (%v)", gap, r.interval)
	}
	if c := warns[1].ContextMap(); c["queue_full"] != int64(4) || c["ended_during_shutdown"] != int64(1) || c["dropped_total"] != int64(6) {
		t.Fatalf("second warning %v, want queue_full=4, ended_during_shutdown=1, dropped_total=6", c)
	}

	r.drop(&r.full) // within the interval again: a timer is armed
	r.drop(&r.full)
	r.stop()
	warns = logs.All()
	if len(warns) != 3 || warns[2].ContextMap()["queue_full"] != int64(2) || warns[2].ContextMap()["dropped_total"] != int64(8) {
		t.Fatalf("warnings %v, want a third at stop with queue_full=2, dropped_total=8", warns)
	}
	if warnedDrops(logs) != r.total.Load() {
		t.Fatalf("%d dropped, %d warned about", r.total.Load(), warnedDrops(logs))
	}
	r.drop(&r.full) // after stop, within the interval: counted, no timer
	r.mu.Lock()
	armed := r.timer != nil
	r.mu.Unlock()
	if armed || r.total.Load() != 9 {
		t.Fatalf("after stop: timer armed %v, %d dropped; want none, 9", armed, r.total.Load())
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
	// The first drop is warned about at once, the others (well within 10 s
	// of it) at the stop.
	warns := logs.FilterMessageSnippet("spans dropped before export").All()
	if len(warns) != 2 || warns[0].Level != zap.WarnLevel || warns[0].ContextMap()["queue_full"] != int64(1) {
		t.Fatalf("warnings about the dropped spans: %v, want two, the first with queue_full=1", warns)
	}
	if warned := warnedDrops(logs); warned != dropped || warns[1].ContextMap()["dropped_total"] != dropped {
		t.Fatalf("%d spans dropped, the warnings counted %d (dropped_total %v): every drop must be warned about by the stop",
			dropped, warned, warns[1].ContextMap()["dropped_total"])
	}
}

// With a backend that hangs, the drops after the first warning are warned
// about when the interval ends, while the app runs, and those of the last
// interval at the stop: in all, the warnings count every dropped span.
func TestDroppedSpans_WarnedAtIntervalEndAndAtStop(t *testing.T) {
	rc := &receiver{}
	release := make(chan struct{})
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-release
		rc.serve(w, r)
	}))
	t.Cleanup(backend.Close)
	var released sync.Once
	unblock := func() { released.Do(func() { close(release) }) }
	t.Cleanup(unblock) // before backend.Close, which waits for the hanging exports
	log, logs, logged := dropWarnings()
	reg := prometheus.NewRegistry()
	var svc ITracingService
	var prov *Provider
	app := fxtest.New(t, fx.NopLogger, fx.Supply(log),
		fx.Supply(fx.Annotate(reg, fx.As(new(prometheus.Registerer)))),
		fx.Supply(Config{Exporter: ExporterConfig{Type: ExporterOTLP, Endpoint: backend.URL},
			Batch: BatchConfig{MaxQueueSize: 2, MaxExportBatchSize: 1}}),
		Module,
		fx.Populate(&prov, fx.Annotate(&svc, fx.ParamTags(`name:"TRACING_SERVICE"`))),
	)
	prov.drops.interval = 100 * time.Millisecond
	app.RequireStart()
	end := func(n int) {
		for i := 0; i < n; i++ {
			_, sp := svc.StartSpan(context.Background(), "work")
			sp.End()
		}
	}
	end(20) // at most 2 wait and 1 hangs in the export: the rest is dropped
	awaitWarning(t, logged, "at the first drop")
	if dropped := prov.DroppedSpans(); dropped < 17 {
		t.Fatalf("%d spans dropped, want at least 17", dropped)
	}
	// The app runs on: the next warnings come at the ends of intervals
	// (more than one only if ending the 20 spans took longer than one).
	for warned := warnedDrops(logs); warned != prov.DroppedSpans(); warned = warnedDrops(logs) {
		awaitWarning(t, logged, fmt.Sprintf("at the end of the interval (%d of %d dropped spans warned about)", warned, prov.DroppedSpans()))
	}
	if n := logs.FilterMessageSnippet("spans dropped before export").Len(); n < 2 {
		t.Fatalf("%d warnings, want the first drop's and at least one at the end of an interval", n)
	}
	end(5) // dropped too, within the next interval
	unblock()
	app.RequireStop()
	dropped := prov.DroppedSpans()
	if warned := warnedDrops(logs); warned != dropped || dropped < 22 {
		t.Fatalf("%d spans dropped, %d warned about after the stop", dropped, warned)
	}
	if v := counterValue(t, reg, "tracing_export_errors_total"); v != float64(dropped) {
		t.Fatalf("tracing_export_errors_total = %v, want the %d dropped spans", v, dropped)
	}
}

// The gate's cost on the path of an ended span (the next processor does
// nothing; the exporter side is simulated by releasing every slot).
func BenchmarkDropGate_OnEnd(b *testing.B) {
	g := gateOf(&heldProcessor{}, 1<<30, newDropReport())
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
