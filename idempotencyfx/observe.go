package idempotencyfx

import (
	"context"
	"sync/atomic"
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
func (o *observer) count(oc Outcome) { o.outcomes[oc].Inc() }

// AttrOutcome is the span attribute that carries the Outcome.
const AttrOutcome = "redisfx.idempotency.outcome"

// Reasons of idempotency_notification_failures_total.
const (
	notifySubscribeDenied    = "subscribe_denied"    // Redis refused a SUBSCRIBE (NOPERM: no channel permission)
	notifyPublishFailed      = "publish_failed"      // a completion was recorded, but its PUBLISH failed
	notifyConnectionReplaced = "connection_replaced" // the subscription connection failed or went silent and was replaced
)

// observer records outcomes as metrics (registered only with a Registerer)
// and span attributes.
type observer struct {
	requests       *prometheus.CounterVec
	wait           prometheus.Histogram
	notifyFailures *prometheus.CounterVec
	tracer         trace.TracerProvider
	// outcomes are the children of requests, one per Outcome; read only.
	outcomes map[Outcome]prometheus.Counter

	outboxLag    prometheus.Histogram
	outboxErrors prometheus.Counter
	box          atomic.Pointer[outbox] // read by the outbox gauges
}

func newObserver(reg prometheus.Registerer, tp trace.TracerProvider) (*observer, error) {
	o := &observer{outcomes: map[Outcome]prometheus.Counter{}, tracer: tp}
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
	o.outboxLag = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "idempotency_outbox_lag_seconds",
		Help:    "Time from the commit of an outcome's events to their delivery to their streams.",
		Buckets: []float64{.001, .005, .01, .05, .1, .5, 1, 5, 10, 30, 60, 300},
	})
	o.outboxErrors = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "idempotency_outbox_relay_errors_total",
		Help: "Relay tries that failed to deliver a record's events (they are tried again).",
	})
	pending := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "idempotency_outbox_pending",
		Help: "Records whose committed events await delivery, as this process last read the outbox index (0 when it has not in 15s: take the max across instances).",
	}, func() float64 { return o.outboxReading(func(b *outbox) float64 { return float64(b.pending.Load()) }) })
	oldest := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "idempotency_outbox_oldest_pending_seconds",
		Help: "Age of the oldest committed event not yet delivered, as this process last read the outbox index (0 when none, or when it has not read it in 15s: take the max across instances).",
	}, func() float64 {
		return o.outboxReading(func(b *outbox) float64 {
			if at := b.oldest.Load(); at > 0 {
				return time.Since(time.UnixMilli(at)).Seconds()
			}
			return 0
		})
	})
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
	if reg == nil {
		return o, nil
	}
	for _, c := range []prometheus.Collector{o.requests, o.wait, o.notifyFailures, o.outboxLag, o.outboxErrors, pending, oldest} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return o, nil
}

func (o *observer) notificationFailure(reason string) {
	o.notifyFailures.WithLabelValues(reason).Inc()
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
	o.wait.Observe(d.Seconds())
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

// outboxReading is read(box) when this process read the outbox index in the
// last three polls, else 0.
func (o *observer) outboxReading(read func(*outbox) float64) float64 {
	b := o.box.Load()
	if b == nil || time.Since(time.Unix(0, b.readAt.Load())) > 3*b.poll {
		return 0
	}
	return read(b)
}

func (o *observer) outboxDelivered(lag time.Duration) { o.outboxLag.Observe(lag.Seconds()) }

func (o *observer) outboxFailure() { o.outboxErrors.Inc() }
