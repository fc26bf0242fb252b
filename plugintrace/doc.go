// Package plugintrace is what the redisfx plugins (lockfx, cachefx,
// ratelimitfx, streamfx, idempotencyfx) share to trace their operations: the
// plugin span with its common attributes, the attribute keys, the Fx name of
// the plugin TracerProvider, and a context marker that keeps background work
// out of the Redis command spans.
//
// It depends on the OpenTelemetry API only, as go-redis's redisotel does, so
// a program that wants a lock does not link an exporter, gRPC or a log
// bridge. tracingfx provides the TracerProvider these spans go to; without it
// they go nowhere (a no-op provider).
//
// # A plugin span
//
// A plugin receives the provider under the Fx name TracerProviderName, and
// opens one span per operation:
//
//	ctx, span := plugintrace.Start(ctx, tp, "locks", "lock.acquire", "SET",
//		attribute.String("redisfx.lock.key", key))
//	defer func() { span.Finish(err) }()
//
// Start sets redisfx.plugin, db.system.name, db.system, db.operation.name and
// db.operation; Finish sets redisfx.duration_ms and the status: OK, or ERROR
// with the exception, the message and redisfx.error=true. An outcome that is
// a failure of the operation but not a Go error (a lock not acquired, a
// request rate-limited) is marked with Fail before Finish(nil). Every span
// has the instrumentation scope ScopeName, as tracingfx's command spans do
// (httpfx's SERVER spans have httpfx.TracerName).
// Use StartKind for a PRODUCER, CONSUMER or CLIENT span.
//
// The Redis commands a plugin sends inside the span are children of it:
// tracingfx's hook makes a redis.<COMMAND> span under whatever span the
// context carries.
//
// # Background work
//
// Work nobody asked for (a stream consumer's polling, a renewal loop, a
// start-up preload, a health probe) runs with WithoutCommandSpans(ctx): its
// commands are counted in the command metrics but make no span, so an idle
// process does not start a trace per poll.
package plugintrace
