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
// With no Config nothing is exported: the request's and the application's
// spans are id-only (trace ids reach the logs), command and plugin spans
// are not made. One variable is enough to export:
//
//	OTEL_EXPORTER_OTLP_ENDPOINT=http://collector:4318
//
// Where a Config field is zero, the standard OpenTelemetry variable applies
// (read by OpenTelemetry's autoexport, autoprop, SDK and exporters); a bad
// value of either fails start-up with a *redisfx.ConfigError naming it. At
// start the module logs "tracing configured" with the effective exporter,
// endpoint and sampler.
//
// Module provides ITracingService under the Fx name TRACING_SERVICE:
//
//	type Params struct {
//		fx.In
//		Tracer tracingfx.ITracingService `name:"TRACING_SERVICE"`
//	}
//
// Every storefx client gets a hook that makes redis.<COMMAND> spans (kind
// CLIENT, OpenTelemetry's database attributes, no argument values unless
// Config.Spans.IncludeArgs) and counts commands in Prometheus when a
// prometheus.Registerer is in the graph. UseTracerProvider brings the
// application's own provider; SetGlobals sets OpenTelemetry's globals.
// Without Fx: NewProvider, Instrumentation, NewTracingService, and
// Provider.Shutdown when done.
//
// See docs/tracing.md for the span catalogue, the console format, sampling
// and backends.
package tracingfx
