package plugintrace

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of every span redisfx makes but
// httpfx's SERVER spans (httpfx.TracerName), and of the log bridge's records.
const ScopeName = "github.com/redisfx/redisfx"

// TracerProviderName is the Fx name of the trace.TracerProvider the plugins
// open their spans with. tracingfx provides it: a no-op provider unless
// tracingfx.Config.PluginTracing is on. Inject it with
//
//	Tracer trace.TracerProvider `name:"redisfx.plugin_tracer" optional:"true"`
const TracerProviderName = "redisfx.plugin_tracer"

// Attribute keys that plugin and command spans share.
const (
	// Plugin names the plugin of a span: cache, locks, rate-limit, streams,
	// idempotency.
	Plugin = attribute.Key("redisfx.plugin")
	// Client names the storefx client a command ran on ("default" or the
	// name of a named client).
	Client = attribute.Key("redisfx.client")
	// DurationMS is the span's duration in milliseconds, for queries that
	// cannot compute it from the span's timestamps.
	DurationMS = attribute.Key("redisfx.duration_ms")
	// Error is true on a failed span, so tail-sampling rules can keep it.
	Error = attribute.Key("redisfx.error")
)

// DBSystem is db.system.name=redis, and the older db.system=redis that
// dashboards built on earlier conventions still query.
var DBSystem = []attribute.KeyValue{semconv.DBSystemNameRedis, attribute.String("db.system", "redis")}

// Span is a span of a plugin operation (cache.get, lock.acquire …) that
// carries redisfx.plugin, db.system(.name), db.operation(.name) and, at
// Finish, redisfx.duration_ms.
type Span struct {
	trace.Span
	began  time.Time
	failed bool // Fail was called: Finish(nil) keeps the ERROR status
}

// Start opens a plugin span of kind INTERNAL. plugin is "cache", "locks",
// "rate-limit", "streams" or "idempotency"; operation is the Redis operation
// behind the span (GET, SET, INCR …), or "".
func Start(ctx context.Context, tp trace.TracerProvider, plugin, name, operation string, attrs ...attribute.KeyValue) (context.Context, *Span) {
	return StartKind(ctx, tp, trace.SpanKindInternal, plugin, name, operation, attrs...)
}

// StartKind is Start with a span kind: PRODUCER for publishing, CONSUMER for
// consuming, CLIENT for a call to another service.
// The attributes are set only on a span that records: an unsampled or
// no-op span costs no attribute building.
func StartKind(ctx context.Context, tp trace.TracerProvider, kind trace.SpanKind, plugin, name, operation string, attrs ...attribute.KeyValue) (context.Context, *Span) {
	// An invalid kind is INTERNAL, as the SDK makes it.
	ctx, sp := tp.Tracer(ScopeName).Start(ctx, name, kinds[trace.ValidateSpanKind(kind)]...)
	if sp.IsRecording() {
		kvs := append(append(make([]attribute.KeyValue, 0, 5+len(attrs)), Plugin.String(plugin)), DBSystem...)
		if operation != "" {
			kvs = append(kvs, semconv.DBOperationName(operation), attribute.String("db.operation", operation))
		}
		sp.SetAttributes(append(kvs, attrs...)...) // one call: the span is locked once
	}
	return ctx, &Span{Span: sp, began: time.Now()}
}

// kinds are the start options of each span kind, made once: a variadic
// list passed to Tracer.Start is allocated per call.
var kinds = func() (o [trace.SpanKindConsumer + 1][]trace.SpanStartOption) {
	for k := range o {
		o[k] = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKind(k))}
	}
	return o
}()

// Finish sets redisfx.duration_ms and the status, and ends the span: ERROR
// with err's message, the exception event and redisfx.error=true when err
// is non-nil; else OK, unless Fail marked the span failed.
func (s *Span) Finish(err error) {
	if s.IsRecording() {
		s.SetAttributes(DurationMS.Float64(float64(time.Since(s.began).Microseconds()) / 1000))
		switch {
		case err != nil:
			s.Fail(err, err.Error())
		case !s.failed:
			s.SetStatus(codes.Ok, "")
		}
	}
	s.End()
}

// Fail marks the span failed with message as its status description,
// without ending it: for outcomes that are errors of the operation but not
// Go errors (a lock not acquired, a request rate-limited). A later
// Finish(nil) keeps the failure: OpenTelemetry would let OK override it.
func (s *Span) Fail(err error, message string) {
	s.failed = true
	if err != nil {
		s.RecordError(err)
	}
	s.SetStatus(codes.Error, message)
	s.SetAttributes(Error.Bool(true))
}

type noCommandSpans struct{}

// WithoutCommandSpans returns a context whose Redis commands make no command
// span (the command metrics still count them), so that an idle process's
// polling starts no trace per poll. Plugin spans are not affected.
func WithoutCommandSpans(ctx context.Context) context.Context {
	return context.WithValue(ctx, noCommandSpans{}, true)
}

// CommandSpansSuppressed reports whether ctx came from WithoutCommandSpans.
func CommandSpansSuppressed(ctx context.Context) bool {
	return ctx.Value(noCommandSpans{}) != nil
}
