// Package plugintrace is what the redisfx plugins (lockfx, cachefx,
// ratelimitfx, streamfx, idempotencyfx) share to trace their operations: the
// plugin span with its common attributes, the attribute keys, the Fx name of
// the plugin TracerProvider, and a context marker that keeps background work
// out of the Redis command spans. It depends on the OpenTelemetry API only,
// so a program that takes a lock links no exporter.
//
// A plugin receives the provider under the Fx name TracerProviderName and
// opens one span per operation:
//
//	ctx, span := plugintrace.Start(ctx, tp, "locks", "lock.acquire", "SET",
//		attribute.String("redisfx.lock.key", key))
//	defer func() { span.Finish(err) }()
//
// Background work (polling, renewal, probes) runs with WithoutCommandSpans.
package plugintrace
