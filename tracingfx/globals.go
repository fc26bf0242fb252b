package tracingfx

import (
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/fx"
)

// SetGlobals registers the module's TracerProvider and propagator as
// OpenTelemetry's process-wide globals when the app starts, so that
// libraries which call otel.Tracer or otel.GetTextMapPropagator (otelhttp
// clients, database drivers) join the app's traces. Add it at the root of the app:
//
//	fx.New(tracingfx.Module, tracingfx.SetGlobals, …)
//
// It is off by default: the globals belong to the whole process.
var SetGlobals = fx.Invoke(func(lc fx.Lifecycle, tp trace.TracerProvider, prop propagation.TextMapPropagator) {
	lc.Append(fx.StartHook(func() {
		otel.SetTracerProvider(tp)
		otel.SetTextMapPropagator(prop)
	}))
})
