package idempotencyfx

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/redisfx/redisfx/plugintrace"
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
	// Counted besides the request's outcome:
	OutcomeUnreplicated           Outcome = "unreplicated_claim"      // a claim missed ReplicaAcks in time
	OutcomeUnreplicatedCompletion Outcome = "unreplicated_completion" // a recorded outcome missed ReplicaAcks in time
	OutcomePendingCompletion      Outcome = "pending_completion"      // the request could not record its outcome; it ends late or lost
	OutcomeLateCompletion         Outcome = "late_completion"         // recorded in the background
	OutcomeLostCompletion         Outcome = "lost_completion"         // never confirmed recorded: a retry may run the handler again
)

// count counts oc without touching a span.
func (o *observer) count(oc Outcome) {
	if c := o.outcomes[oc]; c != nil { // every outcome's counter, made in newObserver
		c.Inc()
	}
}

// AttrOutcome is the span attribute that carries the Outcome.
const AttrOutcome = "redisfx.idempotency.outcome"

// Reasons of idempotency_notification_failures_total.
const (
	notifySubscribeDenied    = "subscribe_denied"    // Redis refused a SUBSCRIBE (NOPERM: no channel permission)
	notifyPublishFailed      = "publish_failed"      // a completion was recorded, but its PUBLISH failed
	notifyConnectionReplaced = "connection_replaced" // the subscription connection failed or went silent and was replaced
)

// observer records outcomes as metrics and span attributes.
type observer struct {
	requests       *prometheus.CounterVec
	wait           prometheus.Histogram
	notifyFailures *prometheus.CounterVec
	tracer         trace.TracerProvider
	// outcomes are the children of requests, made at start; read only.
	outcomes map[Outcome]prometheus.Counter
}

func newObserver(reg prometheus.Registerer, tp trace.TracerProvider) (*observer, error) {
	o := &observer{outcomes: map[Outcome]prometheus.Counter{}, tracer: tp}
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
	o.notifyFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "idempotency_notification_failures_total",
		Help: "Failures of the pub/sub notification that wakes waiting duplicates (they poll instead), by reason.",
	}, []string{"reason"})
	for _, c := range []prometheus.Collector{o.requests, o.wait, o.notifyFailures} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	// Pre-create every series so dashboards see zeros, not gaps.
	for _, oc := range []Outcome{OutcomeNew, OutcomeReplay, OutcomeWaitedReplay, OutcomeMismatch,
		OutcomeInProgress, OutcomePreviousFailed, OutcomeNotReplayable, OutcomeTakeover, OutcomeStaleOwner,
		OutcomeBypass, OutcomeStoreError, OutcomeFailOpen, OutcomeInvalidKey, OutcomeKeyRequired, OutcomeUnreplicated, OutcomeUnreplicatedCompletion,
		OutcomePendingCompletion, OutcomeLateCompletion, OutcomeLostCompletion} {
		o.outcomes[oc] = o.requests.WithLabelValues(string(oc))
	}
	for _, r := range []string{notifySubscribeDenied, notifyPublishFailed, notifyConnectionReplaced} {
		o.notifyFailures.WithLabelValues(r)
	}
	return o, nil
}

func (o *observer) notificationFailure(reason string) {
	if o.notifyFailures != nil {
		o.notifyFailures.WithLabelValues(reason).Inc()
	}
}

func (o *observer) outcome(ctx context.Context, oc Outcome) {
	o.count(oc)
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(attribute.String(AttrOutcome, string(oc)))
	}
}

// AttrWaitTimeoutMS is the idempotency.wait span's WaitTimeout, in ms.
const AttrWaitTimeoutMS = "redisfx.idempotency.wait_timeout_ms"

// startWait opens the idempotency.wait plugin span, when plugin tracing is on.
func (o *observer) startWait(ctx context.Context, timeout time.Duration) (context.Context, *plugintrace.Span) {
	if o.tracer == nil {
		return ctx, nil
	}
	return plugintrace.Start(ctx, o.tracer, "idempotency", "idempotency.wait", "SUBSCRIBE",
		attribute.Int64(AttrWaitTimeoutMS, timeout.Milliseconds()))
}

// waited records a wait's duration, and its span's outcome and status.
func (o *observer) waited(span *plugintrace.Span, d time.Duration, oc Outcome, err error) {
	if o.wait != nil {
		o.wait.Observe(d.Seconds())
	}
	if span == nil {
		return
	}
	if oc != "" {
		span.SetAttributes(attribute.String(AttrOutcome, string(oc)))
	}
	if oc != "" && oc != OutcomeInProgress {
		err = nil // an answer about the first request: the wait did its work
	}
	span.Finish(err)
}
