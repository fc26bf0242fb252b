package idempotencyfx

import (
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/redisfx/redisfx/httpfx"
	"github.com/redisfx/redisfx/streamfx"
)

// Option adds an optional collaborator to New.
type Option func(*options)

type options struct {
	log        *zap.Logger
	registerer prometheus.Registerer
	tracer     trace.TracerProvider
	errors     *httpfx.Errors
	streams    *streamfx.Streams
	outboxTimings
}

// WithLogger logs warnings (fail-open, lost leases, store failures) to log.
func WithLogger(log *zap.Logger) Option { return func(o *options) { o.log = log } }

// WithRegisterer registers the idempotency metrics with reg.
func WithRegisterer(reg prometheus.Registerer) Option {
	return func(o *options) { o.registerer = reg }
}

// WithTracerProvider opens plugin spans (idempotency.wait) with tp.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(o *options) { o.tracer = tp }
}

// WithErrors renders errors through an application's error chain instead of
// the built-in one.
func WithErrors(e *httpfx.Errors) Option { return func(o *options) { o.errors = e } }

// WithStreams turns the outbox on: Emit's events are relayed to streams
// (their MaxLen and Retention apply). idempotencyfx.Module does it when the
// app has streamfx.Module.
func WithStreams(streams *streamfx.Streams) Option { return func(o *options) { o.streams = streams } }
