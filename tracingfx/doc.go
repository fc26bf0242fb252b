// Package tracingfx gives an Fx application OpenTelemetry tracing: a
// TracerProvider with an exporter, a span for every Redis command, the
// plugins' spans, and a tracing service for the application's own spans.
//
//	fx.New(
//		fx.Provide(zap.NewProduction), // tracingfx needs a logger; it does not provide one
//		storefx.Module,
//		tracingfx.Module,
//		fx.Supply(tracingfx.Config{ServiceName: "payments", PluginTracing: true}),
//	)
//
// With no Config nothing is exported (spans are id-only: trace ids still
// reach the logs); one variable is enough to export:
//
//	OTEL_EXPORTER_OTLP_ENDPOINT=http://collector:4318
//
// Without Fx: NewProvider, Instrumentation, NewTracingService, and
// Provider.Shutdown when done. See docs/tracing.md for the span catalogue,
// the console format, sampling and backends.
package tracingfx
