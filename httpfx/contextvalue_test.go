package httpfx_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
	"go.uber.org/fx"
	"go.uber.org/zap"

	"github.com/redisfx/redisfx/httpfx"
)

type (
	anyKey    struct{ v any } // comparable as a type; == panics when v holds a slice
	colourKey struct{}
	sizeKey   struct{}
	parentKey struct{}
)

// contextValues registers values as the app's ContextValues.
func contextValues(values ...httpfx.ContextValue) fx.Option {
	opts := make([]fx.Option, 0, len(values))
	for _, v := range values {
		opts = append(opts, fx.Provide(httpfx.AsContextValue(func() httpfx.ContextValue { return v })))
	}
	return fx.Options(opts...)
}

// A ContextValue reaches every handler of every request: router-wide
// middleware, routes, a mounted sub-router, the router's own 404, over a
// real connection and through mux.ServeHTTP alike; the request's own
// context (its values, its cancellation) stays underneath.
func TestContextValue_EveryRequestCarriesIt(t *testing.T) {
	t.Parallel()
	seen := func(r *http.Request) string {
		c, _ := r.Context().Value(colourKey{}).(string)
		s, _ := r.Context().Value(sizeKey{}).(int)
		p, _ := r.Context().Value(parentKey{}).(string)
		return strings.Join([]string{c, string(rune('0' + s)), p}, ",")
	}
	var inMiddleware []string
	var mux *chi.Mux
	a, srv, _ := app(t,
		contextValues(httpfx.ContextValue{Key: colourKey{}, Value: "blue"}, httpfx.ContextValue{Key: sizeKey{}, Value: 7}),
		fx.Provide(httpfx.AsMiddleware(func() httpfx.Middleware {
			return httpfx.Middleware{Name: "reader", Wrap: func(next http.Handler) http.Handler {
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					inMiddleware = append(inMiddleware, seen(r))
					next.ServeHTTP(w, r)
				})
			}}
		})),
		fx.Provide(httpfx.AsRoutes(func() httpfx.Routes {
			return func(r chi.Router) {
				r.Get("/seen", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, seen(r)) })
				r.Route("/api", func(r chi.Router) {
					r.Get("/seen", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, seen(r)) })
				})
				r.Get("/cancelled", func(w http.ResponseWriter, r *http.Request) {
					<-r.Context().Done() // the parent's cancellation reaches through the router's node
					_, _ = io.WriteString(w, r.Context().Err().Error())
				})
			}
		})),
		fx.Populate(&mux))
	defer a.RequireStop()

	if code, _, body := get(t, "http://"+srv.Addr()+"/seen"); code != http.StatusOK || body != "blue,7," {
		t.Fatalf("over the network: %d %q, want 200 \"blue,7,\"", code, body)
	}
	parent := context.WithValue(context.Background(), parentKey{}, "mine")
	for _, path := range []string{"/seen", "/api/seen"} {
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, httptest.NewRequestWithContext(parent, http.MethodGet, path, nil))
		if w.Code != http.StatusOK || w.Body.String() != "blue,7,mine" {
			t.Fatalf("%s through mux.ServeHTTP: %d %q, want 200 \"blue,7,mine\"", path, w.Code, w.Body)
		}
	}
	mux.ServeHTTP(httptest.NewRecorder(), httptest.NewRequestWithContext(parent, http.MethodGet, "/nowhere", nil))
	if want := []string{"blue,7,", "blue,7,mine", "blue,7,mine", "blue,7,mine"}; strings.Join(inMiddleware, " ") != strings.Join(want, " ") {
		t.Fatalf("router-wide middleware saw %q, want %q", inMiddleware, want)
	}

	ctx, cancel := context.WithCancel(parent)
	cancel()
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, httptest.NewRequestWithContext(ctx, http.MethodGet, "/cancelled", nil))
	if w.Body.String() != context.Canceled.Error() {
		t.Fatalf("cancelled request: handler saw %q, want %q", w.Body, context.Canceled)
	}
}

// What context.WithValue would panic on, and a key given twice, fail the
// app's construction with an error naming the field.
func TestContextValue_BadKeysFailConstruction(t *testing.T) {
	t.Parallel()
	for name, values := range map[string][]httpfx.ContextValue{
		"nil key":           {{Key: nil, Value: 1}},
		"uncomparable key":  {{Key: []byte("k"), Value: 1}},
		"key given twice":   {{Key: colourKey{}, Value: "blue"}, {Key: sizeKey{}, Value: 1}, {Key: colourKey{}, Value: "red"}},
		"string key, twice": {{Key: "k", Value: 1}, {Key: "k", Value: 2}},
		// Found by an adversary: a comparable type holding slices made the
		// duplicate check itself panic, and fx.New with it.
		"comparable type, uncomparable values": {{Key: anyKey{[]string{"a"}}, Value: 1}, {Key: anyKey{[]string{"b"}}, Value: 2}},
		"one such key":                         {{Key: anyKey{map[string]int{}}, Value: 1}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			a := fx.New(fx.NopLogger, fx.Supply(zap.NewNop()), fx.Supply(&httpfx.Config{Addr: "127.0.0.1:0"}),
				httpfx.Module, contextValues(values...), fx.Invoke(func(*chi.Mux) {}))
			err := a.Err()
			if err == nil || !strings.Contains(err.Error(), "ContextValue.Key") {
				t.Fatalf("fx.New: %v, want an error naming ContextValue.Key", err)
			}
		})
	}
}

// The router's context values cost nothing per request: a request
// allocates as much with three of them as with none. Measured as an
// average over many requests, compared to half an allocation: a
// context.WithValue per value would add three per request, while a sync.Pool
// emptied by a collection (chi's route contexts) adds a fraction.
func TestContextValue_CostsNoAllocation(t *testing.T) { // not parallel: other tests' allocations would count
	allocs := func(values ...httpfx.ContextValue) float64 {
		var mux *chi.Mux
		a, _, _ := app(t, contextValues(values...), fx.Decorate(func(*zap.Logger) *zap.Logger { return zap.NewNop() }),
			fx.Populate(&mux))
		defer a.RequireStop()
		serve := func() { mux.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/items/1", nil)) }
		serve() // the route's metric children are made once
		const n = 2000
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for range n {
			serve()
		}
		runtime.ReadMemStats(&after)
		return float64(after.Mallocs-before.Mallocs) / n
	}
	none := allocs()
	three := allocs(httpfx.ContextValue{Key: colourKey{}, Value: "blue"}, httpfx.ContextValue{Key: sizeKey{}, Value: 7},
		httpfx.ContextValue{Key: parentKey{}, Value: errors.New("x")})
	if three-none > 0.5 {
		t.Fatalf("a request allocates %.2f times with three context values, %.2f without: want the same", three, none)
	}
}
