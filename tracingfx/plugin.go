package tracingfx

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// PluginTracerName is the Fx name of the trace.TracerProvider that plugin
// modules open their spans with. It is a no-op provider unless
// Config.PluginTracing is on.
const PluginTracerName = "redisfx.plugin_tracer"

// PluginSpan is a span of a plugin operation (cache.get, lock.acquire,
// idempotency.wait …) with the attributes every plugin span carries:
// redisfx.plugin, db.system, db.operation and, at End, redisfx.duration_ms.
type PluginSpan struct {
	trace.Span
	began time.Time
}

// StartPluginSpan opens a plugin span named name, of kind INTERNAL unless
// opts say otherwise. plugin is "cache", "locks", "rate-limit", "idempotency" …;
// operation is the Redis operation behind it (GET, SET, INCR …), or "".
func StartPluginSpan(ctx context.Context, tp trace.TracerProvider, plugin, name, operation string, attrs ...attribute.KeyValue) (context.Context, *PluginSpan) {
	return StartPluginSpanKind(ctx, tp, trace.SpanKindInternal, plugin, name, operation, attrs...)
}

// StartPluginSpanKind is StartPluginSpan with a span kind: PRODUCER for
// publishing, CONSUMER for consuming (streams), CLIENT …
func StartPluginSpanKind(ctx context.Context, tp trace.TracerProvider, kind trace.SpanKind, plugin, name, operation string, attrs ...attribute.KeyValue) (context.Context, *PluginSpan) {
	base := []attribute.KeyValue{attribute.String(AttrPlugin, plugin), attribute.String("db.system", "redis"), attribute.String("db.system.name", "redis")}
	if operation != "" {
		base = append(base, attribute.String("db.operation", operation), attribute.String("db.operation.name", operation))
	}
	ctx, sp := tp.Tracer("github.com/redisfx/redisfx/plugins").Start(ctx, name,
		trace.WithSpanKind(kind), trace.WithAttributes(append(base, attrs...)...))
	return ctx, &PluginSpan{Span: sp, began: time.Now()}
}

// Finish sets redisfx.duration_ms and the status (ERROR with message and
// redisfx.error when err is non-nil, else OK) and ends the span.
func (p *PluginSpan) Finish(err error) {
	p.SetAttributes(attribute.Float64(AttrDurationMS, float64(time.Since(p.began).Microseconds())/1000))
	if err != nil {
		p.RecordError(err)
		p.SetStatus(codes.Error, err.Error())
		p.SetAttributes(attribute.Bool(AttrError, true))
	} else {
		p.SetStatus(codes.Ok, "")
	}
	p.End()
}
