package tracingfx

import (
	"cmp"
	"context"
	"sync"
	"sync/atomic"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.uber.org/zap"
)

// flushSlack is the room the SDK's queue gets beyond Batch.MaxQueueSize for
// ForceFlush markers; a slot is held until the SDK's ForceFlush returns, so
// markers can never fill the queue and make the SDK drop a span.
const flushSlack = 16

// dropGate drops, counts and reports the spans the SDK's batch processor
// would drop and count only internally: at Batch.MaxQueueSize spans waiting
// for the exporter, or once shutdown began.
type dropGate struct {
	sdktrace.SpanProcessor // the batch processor; OnStart goes straight to it
	// max is Batch.MaxQueueSize; the SDK's queue holds max+flushSlack.
	max int64
	// outstanding: handed on, not yet given to the exporter.
	outstanding atomic.Int64
	// mu: OnEnd holds it for reading, Shutdown takes it to set stopped, so
	// that no span is handed on after the processor stopped taking them.
	mu       sync.RWMutex
	stopped  bool
	flushing chan struct{} // a slot per marker in the SDK's queue
	drops    *dropReport
}

// newDropGate builds the batch processor for exp with the gate in front.
// exp must call gate.exported for every batch it is given.
func newDropGate(b BatchConfig, drops *dropReport, exp *spanExporter) *dropGate {
	limit := cmp.Or(b.MaxQueueSize, sdktrace.DefaultMaxQueueSize)
	g := gateOf(nil, limit, drops)
	exp.gate = g
	b.MaxQueueSize = limit + flushSlack
	b.MaxExportBatchSize = min(b.MaxExportBatchSize, limit) // a larger batch would never fill
	g.SpanProcessor = sdktrace.NewBatchSpanProcessor(exp, batchOptions(b)...)
	return g
}

// gateOf is a gate in front of next, handing on at most limit spans.
func gateOf(next sdktrace.SpanProcessor, limit int, drops *dropReport) *dropGate {
	return &dropGate{SpanProcessor: next, max: int64(limit), flushing: make(chan struct{}, flushSlack), drops: drops}
}

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
	g.SpanProcessor.OnEnd(s)
}

// exported notes n spans given to the exporter.
func (g *dropGate) exported(n int) { g.outstanding.Add(-int64(n)) }

// ForceFlush implements sdktrace.SpanProcessor. The SDK's ForceFlush runs
// until its marker has been processed (or Shutdown began), holding its
// slot, even if ctx ends first; this call returns when either ends.
func (g *dropGate) ForceFlush(ctx context.Context) error {
	select {
	case g.flushing <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	done := make(chan error, 1)
	go func() {
		defer func() { <-g.flushing }()
		done <- g.SpanProcessor.ForceFlush(context.WithoutCancel(ctx))
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
	return g.SpanProcessor.Shutdown(ctx)
}

// dropInterval is the least time between two warnings about dropped spans.
const dropInterval = 10 * time.Second

// dropReport counts a provider's dropped spans and reports each to count
// and in a warning on log: at most one warning per interval, none more than
// an interval late. Without a logger drops are only counted.
type dropReport struct {
	total      atomic.Int64
	full, late atomic.Int64 // since the last warning
	log        atomic.Pointer[zap.Logger]
	count      atomic.Pointer[func()]
	// interval is dropInterval; tests shorten it before the first drop.
	interval time.Duration
	mu       sync.Mutex
	last     time.Time   // of the last warning
	timer    *time.Timer // armed: its warning is due, and it is not stopped yet
	stopped  bool
}

func newDropReport() *dropReport { return &dropReport{interval: dropInterval} }

// use routes the reports to log and count (either may be nil).
func (r *dropReport) use(log *zap.Logger, count func()) {
	r.log.Store(log)
	r.count.Store(&count)
}

// drop counts one dropped span; reason is r.full or r.late.
func (r *dropReport) drop(reason *atomic.Int64) {
	r.total.Add(1)
	reason.Add(1)
	if f := r.count.Load(); f != nil && *f != nil {
		(*f)()
	}
	if r.log.Load() == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.timer != nil {
		return // its warning carries this drop
	}
	now := time.Now()
	if r.last.IsZero() || now.Sub(r.last) >= r.interval {
		r.warn(now)
		return
	}
	if r.stopped {
		return // no timer outlives stop: the next warning carries it
	}
	r.timer = time.AfterFunc(r.last.Add(r.interval).Sub(now), r.fire)
}

// fire is the timer's: it warns about the drops since the last warning.
func (r *dropReport) fire() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return // stop reports them
	}
	r.timer = nil
	r.warn(time.Now())
}

// stop ends the timer (a fire already running returns at once) and warns
// about the drops not reported yet, so nothing of the report outlives
// Shutdown.
func (r *dropReport) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopped = true
	if r.timer != nil {
		r.timer.Stop()
		r.timer = nil
	}
	r.warn(time.Now())
}

// warn logs the counts since the last warning, if any; r.mu is held.
func (r *dropReport) warn(now time.Time) {
	log := r.log.Load()
	full, late := r.full.Swap(0), r.late.Swap(0)
	if log == nil || full+late == 0 {
		r.full.Add(full) // not reported: keep them for the next warning
		r.late.Add(late)
		return
	}
	r.last = now
	log.Warn("tracing: spans dropped before export (the batch queue was full: the backend is slow or down, or spans end faster than Batch.MaxQueueSize absorbs; or they ended while the provider shut down)",
		zap.Int64("queue_full", full), zap.Int64("ended_during_shutdown", late),
		zap.Int64("dropped_total", r.total.Load()))
}

// DroppedSpans is how many sampled spans the provider dropped instead of
// exporting (the batch queue full, or ended during shutdown). In an Fx app
// each is also counted in tracing_export_errors_total and warned about, at
// most once every 10 s and at Shutdown. 0 unless the exporter is OTLP.
func (p *Provider) DroppedSpans() int64 { return p.drops.total.Load() }
