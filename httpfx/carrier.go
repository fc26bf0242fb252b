package httpfx

import (
	"net/http"

	"go.opentelemetry.io/otel/propagation"
)

// requestCarrier is propagation.HeaderCarrier without the allocation that
// canonicalising the W3C names costs on every request.
type requestCarrier http.Header

var (
	_ propagation.TextMapCarrier = requestCarrier{}
	_ propagation.ValuesGetter   = requestCarrier{}
)

func canonicalW3C(key string) string {
	switch key {
	case "traceparent":
		return "Traceparent"
	case "tracestate":
		return "Tracestate"
	case "baggage":
		return "Baggage"
	}
	return ""
}

// Get implements propagation.TextMapCarrier.
func (c requestCarrier) Get(key string) string {
	if k := canonicalW3C(key); k != "" {
		if v := c[k]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
	return http.Header(c).Get(key)
}

// Values implements propagation.ValuesGetter (Baggage reads every baggage
// header).
func (c requestCarrier) Values(key string) []string {
	if k := canonicalW3C(key); k != "" {
		return c[k]
	}
	return http.Header(c).Values(key)
}

// Set implements propagation.TextMapCarrier.
func (c requestCarrier) Set(key, value string) { http.Header(c).Set(key, value) }

// Keys implements propagation.TextMapCarrier.
func (c requestCarrier) Keys() []string { return propagation.HeaderCarrier(c).Keys() }
