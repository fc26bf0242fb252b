package tracingfx

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.uber.org/zap"

	"github.com/redisfx/redisfx/internal/throttle"
)

// The SDK's BatchSpanProcessor drops a span when its queue is full and one
// that ends while it shuts down, and counts those drops only internally: a
// backend that answers slowly would lose spans without a log line or a
// metric. dropGate sits in front of it and drops (and reports) those spans
// itself, so that the SDK never has to.

// flushSlack is the room the SDK's queue gets beyond Batch.MaxQueueSize,
// for the marker each ForceFlush puts in it; dropGate lets at most that
// many markers be in the queue at once. A marker stays there until the
// processor reaches it, also when the ForceFlush that put it gave up (its
// context ended while an export hung), so a slot is held until the SDK's
// ForceFlush returns, not the caller's: the SDK's queue can never fill
// with markers and drop a span the gate handed on (which would also leave
// the gate counting it as waiting for ever; found by an adversary).
const flushSlack = 16

// dropGate counts the sampled spans it hands to the batch processor and
// the spans the exporter received (spanExporter tells it): the difference
// is what waits in the processor's queue and batch. When that reaches
// Batch.MaxQueueSize it drops the span itself instead of handing it on; a
// span that ends once shutdown began is dropped too. Every drop is
// reported to drops. The path of a span is two atomic additions on the
// read lock and one on the counter.
type dropGate struct {
	next sdktrace.SpanProcessor
	// max is Batch.MaxQueueSize; the SDK's queue holds max+flushSlack.
	max int64
	// outstanding: handed on, not yet given to the exporter.
	outstanding atomic.Int64
	// mu: OnEnd holds it for reading, Shutdown takes it to set stopped, so
	// that no span is handed on after the processor stopped taking them.
	mu       sync.RWMutex
	stopped  bool
	flushing chan struct{} // a slot per marker in the SDK's queue
	// flushes ends the SDK ForceFlush calls still waiting for their marker
	// once Shutdown is over; flushWait waits for them.
	flushes    context.Context
	endFlushes context.CancelFunc
	flushWait  sync.WaitGroup
	drops      *dropReport
}

var _ sdktrace.SpanProcessor = (*dropGate)(nil)

// newDropGate builds the batch processor for exp with the gate in front.
// exp must call gate.exported for every batch it is given.
func newDropGate(b BatchConfig, drops *dropReport, exp *spanExporter) *dropGate {
	limit := b.MaxQueueSize
	if limit <= 0 {
		limit = sdktrace.DefaultMaxQueueSize
	}
	g := gateOf(nil, limit, drops)
	exp.gate = g
	b.MaxQueueSize = limit + flushSlack
	g.next = sdktrace.NewBatchSpanProcessor(exp, batchOptions(b)...)
	return g
}

// gateOf is a gate in front of next, handing on at most limit spans.
func gateOf(next sdktrace.SpanProcessor, limit int, drops *dropReport) *dropGate {
	g := &dropGate{next: next, max: int64(limit), flushing: make(chan struct{}, flushSlack), drops: drops}
	g.flushes, g.endFlushes = context.WithCancel(context.Background())
	return g
}

// OnStart implements sdktrace.SpanProcessor.
func (g *dropGate) OnStart(ctx context.Context, s sdktrace.ReadWriteSpan) { g.next.OnStart(ctx, s) }

// OnEnd implements sdktrace.SpanProcessor.
func (g *dropGate) OnEnd(s sdktrace.ReadOnlySpan) {
	if !s.SpanContext().IsSampled() {
		return // the batch processor ignores it too: not a drop
	}
	g.mu.RLock()
	defer g.mu.RUnlock()
	if g.stopped {
		g.drops.drop(&g.drops.late)
		return
	}
	if g.outstanding.Add(1) > g.max {
		g.outstanding.Add(-1)
		g.drops.drop(&g.drops.full)
		return
	}
	g.next.OnEnd(s)
}

// exported notes n spans given to the exporter.
func (g *dropGate) exported(n int) { g.outstanding.Add(-int64(n)) }

// ForceFlush implements sdktrace.SpanProcessor. The SDK's ForceFlush runs
// until its marker has been processed (or Shutdown is over), holding its
// slot, even if ctx ends first; this call returns when either ends.
func (g *dropGate) ForceFlush(ctx context.Context) error {
	select {
	case g.flushing <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	done := make(chan error, 1)
	g.flushWait.Add(1)
	go func() {
		defer g.flushWait.Done()
		defer func() { <-g.flushing }()
		done <- g.next.ForceFlush(g.flushes)
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Shutdown implements sdktrace.SpanProcessor: from now on every span that
// ends is dropped (and counted); the batch processor then flushes the
// spans it holds.
func (g *dropGate) Shutdown(ctx context.Context) error {
	g.mu.Lock()
	g.stopped = true
	g.mu.Unlock()
	err := g.next.Shutdown(ctx)
	g.endFlushes()
	g.flushWait.Wait() // at once: their context has ended
	return err
}

// dropInterval is the least time between two warnings about dropped spans.
const dropInterval = 10 * time.Second

// dropReport counts a provider's dropped spans and reports them: each one
// to count (tracing_export_errors_total, in an Fx app), and in a warning on
// log, the first at once and then at most one every dropInterval, with the
// count since the last one. Before use is called (or without Fx) drops
// are only counted, in total.
type dropReport struct {
	total      atomic.Int64
	full, late atomic.Int64 // since the last warning
	every      throttle.Every
	log        atomic.Pointer[zap.Logger]
	count      atomic.Pointer[func()]
}

func newDropReport() *dropReport { return &dropReport{every: throttle.Every{Interval: dropInterval}} }

// use routes the reports to log and count (either may be nil).
func (r *dropReport) use(log *zap.Logger, count func()) {
	r.log.Store(log)
	if count != nil {
		r.count.Store(&count)
	} else {
		r.count.Store(nil)
	}
}

// drop counts one dropped span; reason is r.full or r.late.
func (r *dropReport) drop(reason *atomic.Int64) {
	r.total.Add(1)
	reason.Add(1)
	if f := r.count.Load(); f != nil {
		(*f)()
	}
	log := r.log.Load()
	if log == nil || !r.every.Allow() {
		return
	}
	log.Warn("tracing: spans dropped before export (the batch queue was full: the backend is slow or down, or spans end faster than Batch.MaxQueueSize absorbs; or they ended while the provider shut down)",
		zap.Int64("queue_full", r.full.Swap(0)), zap.Int64("ended_during_shutdown", r.late.Swap(0)),
		zap.Int64("dropped_total", r.total.Load()))
}

// DroppedSpans is how many sampled spans the provider dropped instead of
// exporting since it was built: those that ended while Batch.MaxQueueSize
// spans were already waiting for export, and those that ended while it
// shut down. In an Fx app each is also counted in
// tracing_export_errors_total and reported in a rate-limited warning. It
// is 0 when the exporter is not OTLP (the console exporter writes every
// span as it ends).
func (p *Provider) DroppedSpans() int64 { return p.drops.total.Load() }
