// Package names holds the Fx names and group names that modules share
// without importing each other.
package names

// PluginTracer is the name of the trace.TracerProvider that plugin modules
// (idempotency, cache, locks …) open their spans with. tracingfx provides it,
// as a no-op provider when plugin tracing is off.
const PluginTracer = "redisfx.plugin_tracer"
