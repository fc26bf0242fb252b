package lockfx

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/redisfx/redisfx/internal/plugin"
	"github.com/redisfx/redisfx/plugintrace"
)

// Option adds an optional collaborator to New.
type Option = plugin.Option

// WithRegisterer registers the lock metrics with reg. A nil reg registers nothing.
func WithRegisterer(reg prometheus.Registerer) Option { return plugin.WithRegisterer(reg) }

// WithTracerProvider opens the lock.acquire and lock.release spans with tp
// (tracingfx's plugin tracer: a no-op unless PluginTracing is on).
func WithTracerProvider(tp trace.TracerProvider) Option { return plugin.WithTracerProvider(tp) }

// Attribute names of the lock spans.
const (
	AttrKey        = "redisfx.lock.key"
	AttrTTL        = "redisfx.lock.ttl"
	AttrAcquired   = "redisfx.lock.acquired"
	AttrRetryCount = "redisfx.lock.retry_count"
)

// observer measures and traces lock operations.
type observer struct {
	tracer                                 trace.TracerProvider
	keys                                   plugintrace.KeyAttribute
	active                                 prometheus.Gauge
	acquisitions, attempts, timeouts, lost prometheus.Counter
	wait                                   []prometheus.Histogram
}

func newObserver(reg prometheus.Registerer, tp trace.TracerProvider, keys plugintrace.KeyAttribute) (*observer, error) {
	buckets := []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2, 5}
	o := &observer{tracer: tp, keys: keys,
		active:       prometheus.NewGauge(prometheus.GaugeOpts{Name: "locks_active", Help: "Locks held by this process."}),
		acquisitions: prometheus.NewCounter(prometheus.CounterOpts{Name: "lock_acquisitions_total", Help: "Locks acquired."}),
		attempts:     prometheus.NewCounter(prometheus.CounterOpts{Name: "lock_attempts_total", Help: "Tries to take a lock, retries included."}),
		timeouts:     prometheus.NewCounter(prometheus.CounterOpts{Name: "lock_timeouts_total", Help: "Acquires that gave up."}),
		lost:         prometheus.NewCounter(prometheus.CounterOpts{Name: "lock_lost_total", Help: "Locks whose validity ended before they were released."}),
		// lock_wait_duration_seconds is the older name, kept for dashboards.
		wait: []prometheus.Histogram{
			prometheus.NewHistogram(prometheus.HistogramOpts{Name: "lock_wait_seconds", Help: "Time to acquire a lock (or give up).", Buckets: buckets}),
			prometheus.NewHistogram(prometheus.HistogramOpts{Name: "lock_wait_duration_seconds", Help: "Same as lock_wait_seconds (the older name, kept for dashboards).", Buckets: buckets}),
		},
	}
	return o, plugin.Register(reg, o.active, o.acquisitions, o.attempts, o.timeouts, o.lost, o.wait[0], o.wait[1])
}

// start opens the span of a lock operation with its key attribute.
func (o *observer) start(ctx context.Context, name, op, command string, attrs ...attribute.KeyValue) (context.Context, *plugintrace.Span) {
	ctx, span := plugintrace.Start(ctx, o.tracer, "locks", op, command, attrs...)
	span.SetKey(AttrKey, o.keys, name)
	return ctx, span
}

func (o *observer) endAcquire(span *plugintrace.Span, acquired, timedOut bool, retries int, waited time.Duration, err error) {
	for _, h := range o.wait {
		h.Observe(waited.Seconds())
	}
	if timedOut {
		o.timeouts.Inc()
		span.AddEvent("lock.timeout")
	}
	span.SetAttributes(attribute.Bool(AttrAcquired, acquired), attribute.Int(AttrRetryCount, retries))
	if acquired {
		o.acquisitions.Inc()
		o.active.Inc()
		span.AddEvent("lock.acquired")
	} else {
		// The status the tracing spec gives a lock not acquired; why is the exception event's.
		span.Fail(err, ErrNotAcquired.Message)
	}
	span.Finish(nil)
}

// ended counts a lock out of locks_active, once, when released or lost.
func (o *observer) ended(lost bool) {
	o.active.Dec()
	if lost {
		o.lost.Inc()
	}
}

func (o *observer) endRelease(span *plugintrace.Span, err error) {
	if err == nil {
		span.AddEvent("lock.released")
	}
	span.Finish(err)
}
