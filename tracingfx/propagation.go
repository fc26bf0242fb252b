package tracingfx

import "go.opentelemetry.io/otel/propagation"

// Propagator is W3C TraceContext plus Baggage, the propagator the module
// provides when OTEL_PROPAGATORS is not set.
func Propagator() propagation.TextMapPropagator {
	return propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
}
