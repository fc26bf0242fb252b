package idempotencyfx

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Outcome is what the idempotency layer did with one request. It is a span
// attribute (redisfx.idempotency.outcome) and the label of the
// idempotency_requests_total counter.
type Outcome string

// Outcomes.
const (
	OutcomeNew            Outcome = "new"             // first request: the handler ran
	OutcomeReplay         Outcome = "replay"          // recorded response returned
	OutcomeWaitedReplay   Outcome = "waited_replay"   // waited for a duplicate, then replayed
	OutcomeMismatch       Outcome = "mismatch"        // same key, different request: 422
	OutcomeInProgress     Outcome = "in_progress"     // duplicate still running after WaitTimeout: 409
	OutcomePreviousFailed Outcome = "previous_failed" // first attempt failed: 409
	OutcomeNotReplayable  Outcome = "not_replayable"  // completed but not recorded: 409
	OutcomeTakeover       Outcome = "takeover"        // an abandoned attempt's lease was taken over
	OutcomeStaleOwner     Outcome = "stale_owner"     // a taken-over attempt finished; its outcome was refused
	OutcomeBypass         Outcome = "bypass"          // no key: passed through
	OutcomeStoreError     Outcome = "store_error"     // Redis unavailable
	OutcomeFailOpen       Outcome = "fail_open"       // Redis unavailable; the handler ran unprotected
	OutcomeInvalidKey     Outcome = "invalid_key"     // malformed key: 400
	OutcomeKeyRequired    Outcome = "key_required"    // missing required key: 400
	// OutcomeUnreplicated counts claims that did not reach ReplicaAcks
	// replicas within ReplicaAckTimeout (counted besides the request's outcome).
	OutcomeUnreplicated Outcome = "unreplicated_claim"
)

// AttrOutcome is the span attribute that carries the Outcome.
const AttrOutcome = "redisfx.idempotency.outcome"

// observer records outcomes as metrics and span attributes. Every method is
// a no-op for the parts that are not configured.
type observer struct {
	requests *prometheus.CounterVec
	wait     prometheus.Histogram
	tracer   trace.Tracer
}

func newObserver(reg prometheus.Registerer, tp trace.TracerProvider) (*observer, error) {
	o := &observer{}
	if tp != nil {
		o.tracer = tp.Tracer("github.com/redisfx/redisfx/idempotencyfx")
	}
	if reg == nil {
		return o, nil
	}
	o.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "idempotency_requests_total",
		Help: "Requests seen by the idempotency layer, by outcome.",
	}, []string{"outcome"})
	o.wait = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "idempotency_wait_seconds",
		Help:    "Time concurrent duplicates waited for the first request.",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
	})
	for _, c := range []prometheus.Collector{o.requests, o.wait} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	// Pre-create every series so dashboards see zeros, not gaps.
	for _, oc := range []Outcome{OutcomeNew, OutcomeReplay, OutcomeWaitedReplay, OutcomeMismatch,
		OutcomeInProgress, OutcomePreviousFailed, OutcomeNotReplayable, OutcomeTakeover, OutcomeStaleOwner,
		OutcomeBypass, OutcomeStoreError, OutcomeFailOpen, OutcomeInvalidKey, OutcomeKeyRequired, OutcomeUnreplicated} {
		o.requests.WithLabelValues(string(oc))
	}
	return o, nil
}

func (o *observer) outcome(ctx context.Context, oc Outcome) {
	if o.requests != nil {
		o.requests.WithLabelValues(string(oc)).Inc()
	}
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(attribute.String(AttrOutcome, string(oc)))
	}
}

// startWait opens the idempotency.wait plugin span, when plugin tracing is on.
func (o *observer) startWait(ctx context.Context) (context.Context, trace.Span) {
	if o.tracer == nil {
		return ctx, nil
	}
	return o.tracer.Start(ctx, "idempotency.wait", trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(attribute.String("redisfx.plugin", "idempotency"), attribute.String("db.system", "redis")))
}

func (o *observer) waited(_ context.Context, span trace.Span, d time.Duration, err error) {
	if o.wait != nil {
		o.wait.Observe(d.Seconds())
	}
	if span == nil {
		return
	}
	span.SetAttributes(attribute.Float64("redisfx.duration_ms", float64(d.Microseconds())/1000))
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
