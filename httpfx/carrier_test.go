package httpfx

import (
	"context"
	"math/rand/v2"
	"net/http"
	"slices"
	"testing"

	"go.opentelemetry.io/otel/propagation"
)

// requestCarrier answers exactly as propagation.HeaderCarrier for every
// name a propagator may ask, on random headers with repeated, missing and
// empty values.
func TestRequestCarrier_AnswersAsHeaderCarrier(t *testing.T) {
	t.Parallel()
	names := []string{"traceparent", "tracestate", "baggage", "b3", "x-b3-traceid", "uber-trace-id", "Traceparent", "TRACESTATE", "ot-baggage-k"}
	rng := rand.New(rand.NewPCG(16, 2026))
	for range 2000 {
		h := http.Header{}
		for _, n := range names {
			for range rng.IntN(3) {
				h.Add(n, []string{"", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "k=v", "a,b"}[rng.IntN(4)])
			}
		}
		ours, theirs := requestCarrier(h), propagation.HeaderCarrier(h)
		for _, n := range names {
			if ours.Get(n) != theirs.Get(n) || !slices.Equal(ours.Values(n), theirs.Values(n)) {
				t.Fatalf("%q in %v: Get %q/%q, Values %q/%q", n, h, ours.Get(n), theirs.Get(n), ours.Values(n), theirs.Values(n))
			}
		}
		if !slices.Equal(slices.Sorted(slices.Values(ours.Keys())), slices.Sorted(slices.Values(theirs.Keys()))) {
			t.Fatalf("Keys %v / %v", ours.Keys(), theirs.Keys())
		}
	}
}

// Extracting the W3C fields of a request no longer allocates a canonical
// name per field.
func TestRequestCarrier_ExtractAllocatesLess(t *testing.T) {
	h := http.Header{}
	h.Set("Traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	prop := propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
	ctx := context.Background()
	ours := testing.AllocsPerRun(200, func() { prop.Extract(ctx, requestCarrier(h)) })
	theirs := testing.AllocsPerRun(200, func() { prop.Extract(ctx, propagation.HeaderCarrier(h)) })
	if ours > theirs-3 {
		t.Fatalf("Extract allocates %.0f times with requestCarrier, %.0f with HeaderCarrier: want 3 fewer", ours, theirs)
	}
}
