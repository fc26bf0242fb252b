// Package tracingfx gives an Fx application OpenTelemetry tracing: a
// TracerProvider with an exporter, a span for every Redis command, the
// plugins' spans, and a tracing service for the application's own spans.
//
// # Getting started
//
//	fx.New(
//		fx.Provide(zap.NewProduction), // tracingfx needs a logger; it does not provide one
//		storefx.Module,
//		tracingfx.Module,
//		fx.Supply(tracingfx.Config{ServiceName: "payments", PluginTracing: true}),
//	)
//
// With no Config at all nothing is exported: the request's and the
// application's spans are made (so trace ids reach the logs), command and
// plugin spans are not. Point the app at a backend with the standard
// variable, without changing code:
//
//	OTEL_EXPORTER_OTLP_ENDPOINT=http://collector:4318
//
// or in code with Config.Exporter. At start the module logs one line,
// "tracing configured", naming the exporter, the endpoint spans go to (after
// Config and the environment were applied) and the sampler, and warns about
// settings that are probably mistakes.
//
// # Configuration and the environment
//
// The Config may be supplied by value or by pointer. Where a Config field is
// zero, the standard OpenTelemetry variable beside it applies
// (OTEL_TRACES_EXPORTER, OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_TRACES_SAMPLER,
// OTEL_PROPAGATORS …); a field that is set wins over its variable; and
// OTEL_SDK_DISABLED=true turns tracing off whatever the Config says. A bad
// value of either fails start-up with a *redisfx.ConfigError naming the
// field or the variable. Over HTTP, OTEL_EXPORTER_OTLP_ENDPOINT is a base
// address to which /v1/traces is appended (OpenTelemetry's rule), while
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is used as given. docs/configuration.md
// lists every variable, its default and its precedence.
//
// # The tracing service
//
// Module provides ITracingService under the Fx name TRACING_SERVICE, so a
// service receives it with a name tag:
//
//	type Params struct {
//		fx.In
//		Tracer tracingfx.ITracingService `name:"TRACING_SERVICE"`
//	}
//
// WithSpan runs a function in a child span and sets its status from the
// returned error (or panic); StartSpan leaves ending the span to the caller.
// Spans nest through the context.Context.
//
// # Redis command spans
//
// Every client storefx builds gets a hook that makes a span named
// redis.<COMMAND> (redis.SCRIPT LOAD for a subcommand) of kind CLIENT, under
// the caller's span, with the OpenTelemetry database attributes:
// db.system.name, db.namespace (the database index), db.operation.name,
// server.address and server.port of the node that answered (on a Cluster,
// each node has its own hook), and, on a failure, error.type and
// db.response.status_code (the Redis error prefix, such as WRONGTYPE).
// Argument values never reach a span unless Config.Spans.IncludeArgs is set;
// connection handshakes (which carry credentials) make no span. The same
// hook counts the commands in Prometheus when a prometheus.Registerer is in
// the graph. Probes and background work run with
// plugintrace.WithoutCommandSpans and start no trace.
//
// A span that is not sampled costs the hook no attribute building.
//
// # Bringing your own provider, and OpenTelemetry's globals
//
// An application that builds its own TracerProvider hands it to the module
// with UseTracerProvider; the module then adds its spans and service on that
// provider and leaves its exporter and shutdown to the application.
// SetGlobals registers the module's provider and propagator as
// OpenTelemetry's process-wide globals, for libraries that call otel.Tracer;
// it is off by default because the globals belong to the whole process.
//
// # Without Fx
//
// NewProvider builds the provider from a Config and the environment,
// Instrumentation gives the storefx hook, NewTracingService the service.
// Shut the provider down when done: its exporter flushes within
// Config.ShutdownTimeout.
//
// See docs/tracing.md for the span catalogue, the console format, sampling
// and backends.
package tracingfx
