package ratelimitfx

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/redisfx/redisfx/httpfx"
	"github.com/redisfx/redisfx/internal/plugin"
	"github.com/redisfx/redisfx/plugintrace"
)

// Option adds an optional collaborator to New.
type Option func(*options)

type options struct {
	plugin.Options
	errors *httpfx.Errors
}

// WithErrors renders the middleware's refusals through an application's
// error chain, which must map *ExceededError and *StoreUnavailableError
// (DefaultErrorFilter does) or they become 500s. A nil chain is ignored.
func WithErrors(e *httpfx.Errors) Option { return func(o *options) { o.errors = e } }

// WithRegisterer registers the rate-limit metrics with reg. A nil reg registers nothing.
func WithRegisterer(reg prometheus.Registerer) Option { return func(o *options) { o.Registerer = reg } }

// WithTracerProvider opens the rate_limit.check spans with tp (tracingfx's
// plugin tracer: a no-op unless PluginTracing is on).
func WithTracerProvider(tp trace.TracerProvider) Option { return func(o *options) { o.Tracer = tp } }

// WithLogger logs store failures (at most every 10s) to log, named
// "ratelimit". A nil log is ignored.
func WithLogger(log *zap.Logger) Option { return func(o *options) { o.Log = log } }

// Attribute names of the rate_limit.check span.
const (
	AttrKey       = "redisfx.rate_limit.key"
	AttrLimit     = "redisfx.rate_limit.limit"
	AttrWindow    = "redisfx.rate_limit.window"
	AttrCurrent   = "redisfx.rate_limit.current"
	AttrRemaining = "redisfx.rate_limit.remaining"
	AttrAllowed   = "redisfx.rate_limit.allowed"
)

// Values of the status label of ratelimit_requests_total.
const (
	StatusAllowed  = "allowed"
	StatusRejected = "rejected"
	StatusError    = "error"
)

// observer measures and traces checks.
type observer struct {
	tracer            trace.TracerProvider
	keys              plugintrace.KeyAttribute
	requests          *prometheus.CounterVec
	allowed, rejected prometheus.Counter
}

func newObserver(reg prometheus.Registerer, tp trace.TracerProvider, keys plugintrace.KeyAttribute) (*observer, error) {
	o := &observer{tracer: tp, keys: keys,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ratelimit_requests_total", Help: "Rate-limit checks by outcome: allowed, rejected, or error (store unavailable; the ErrorPolicy decided)."}, []string{"status"}),
		allowed:  prometheus.NewCounter(prometheus.CounterOpts{Name: "ratelimit_allowed_total", Help: "Requests the rate limiter let through."}),
		rejected: prometheus.NewCounter(prometheus.CounterOpts{Name: "ratelimit_rejected_total", Help: "Requests the rate limiter refused (429)."}),
	}
	if err := plugin.Register(reg, o.requests, o.allowed, o.rejected); err != nil {
		return nil, err
	}
	for _, s := range []string{StatusAllowed, StatusRejected, StatusError} {
		o.requests.WithLabelValues(s)
	}
	return o, nil
}

// startCheck opens rate_limit.check; its key attribute is the rule's name
// and the key as Config.KeyAttribute writes it.
func (o *observer) startCheck(ctx context.Context, rule Rule, key string) (context.Context, *plugintrace.Span) {
	ctx, span := plugintrace.Start(ctx, o.tracer, "rate-limit", "rate_limit.check", "INCR",
		attribute.Int64(AttrLimit, rule.Limit), attribute.Int64(AttrWindow, int64(rule.Window.Seconds())))
	if span.IsRecording() {
		span.SetAttributes(attribute.String(AttrKey, rule.Name+":"+o.keys.Value(key)))
	}
	return ctx, span
}

func (o *observer) endCheck(span *plugintrace.Span, d Decision, err error) {
	span.SetAttributes(attribute.Int64(AttrCurrent, d.Current), attribute.Int64(AttrRemaining, d.Remaining), attribute.Bool(AttrAllowed, d.Allowed))
	switch {
	case err != nil:
		o.requests.WithLabelValues(StatusError).Inc()
		span.Finish(err)
	case d.Allowed:
		o.requests.WithLabelValues(StatusAllowed).Inc()
		o.allowed.Inc()
		span.AddEvent("request.allowed")
		span.Finish(nil)
	default:
		o.requests.WithLabelValues(StatusRejected).Inc()
		o.rejected.Inc()
		span.AddEvent("request.blocked")
		span.Finish(newExceededError(d)) // status message "Rate limit exceeded"
	}
}
