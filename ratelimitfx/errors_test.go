package ratelimitfx

import (
	"context"
	"errors"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	"go.uber.org/zap"

	"github.com/redisfx/redisfx"
	"github.com/redisfx/redisfx/httpfx"
	"github.com/redisfx/redisfx/internal/redistest"
	"github.com/redisfx/redisfx/storefx"
)

// The exact answers, unchanged by moving the mapping into an error filter.
const (
	body429 = `{"type":"about:blank","title":"Too Many Requests","status":429,"detail":"Rate limit exceeded","code":"rate_limit_exceeded"}` + "\n"
	body503 = `{"type":"about:blank","title":"Service Unavailable","status":503,"detail":"Rate limiting is unavailable; try again shortly.","code":"rate_limit_unavailable"}` + "\n"
)

// Issue 17: the rate limiter's errors are plain errors, not HTTP responses:
// nothing in them is an *httpfx.ProblemError; an error filter maps them.
func TestErrors_ArePlainErrorsEmbeddingBaseError(t *testing.T) {
	var problem *httpfx.ProblemError
	exceeded := error(newExceededError(Decision{Limit: 1, Current: 2, Reset: time.Second}))
	if errors.As(exceeded, &problem) {
		t.Fatalf("ExceededError unwraps to an HTTP problem %+v", problem.Problem)
	}
	var base *redisfx.BaseError
	if !errors.As(exceeded, &base) || base.Code != CodeExceeded {
		t.Fatalf("ExceededError: base %+v", base)
	}

	srv := redistest.StartPrivate(t)
	l := newLimiter(t, srv, Config{StoreTimeout: 200 * time.Millisecond})
	srv.Kill()
	_, err := l.Check(context.Background(), Rule{}, "k")
	var unavailable *StoreUnavailableError
	if !errors.As(err, &unavailable) || !errors.Is(err, ErrStoreUnavailable) || errors.As(err, &problem) {
		t.Fatalf("store failure: %T %v", err, err)
	}
	if !errors.As(err, &base) || base.Code != CodeUnavailable || base.Err == nil {
		t.Fatalf("store failure's base %+v: want code %s and the cause", base, CodeUnavailable)
	}
}

// wantHeaders fails unless h holds exactly the fields of want (values
// compared where want has one; "*" accepts any).
func wantHeaders(t *testing.T, what string, h http.Header, want map[string]string) {
	t.Helper()
	for name, v := range want {
		if got := h.Values(name); len(got) != 1 || (v != "*" && got[0] != v) {
			t.Errorf("%s: %s = %q, want %q", what, name, got, v)
		}
	}
	canonical := map[string]bool{"Content-Length": true} // httpfx writes problems whole
	for name := range want {
		canonical[http.CanonicalHeaderKey(name)] = true
	}
	for name := range h {
		if !canonical[name] {
			t.Errorf("%s: unexpected field %s: %q", what, name, h.Values(name))
		}
	}
}

// Without Fx, New and the middleware on a bare chi router answer
// problem+json themselves: 429 over the limit, 503 when the store is down
// under fail-closed.
func TestWire_BareChiRouter_429And503(t *testing.T) {
	t.Parallel()
	srv := redistest.StartPrivate(t)
	l := newLimiter(t, srv, Config{})
	closed := newLimiter(t, srv, Config{ErrorPolicy: FailClosed, StoreTimeout: 200 * time.Millisecond})
	served := 0
	r := chi.NewRouter()
	r.With(l.Limit(Rule{Limit: 1, Window: time.Minute})).Get("/x", func(http.ResponseWriter, *http.Request) { served++ })
	r.With(closed.Limit(Rule{Limit: 1, Window: time.Minute})).Get("/closed", func(http.ResponseWriter, *http.Request) { served++ })
	if w := get(r, "/x"); w.Code != 200 {
		t.Fatalf("first: %d", w.Code)
	}
	w := get(r, "/x")
	if w.Code != 429 || w.Body.String() != body429 || served != 1 {
		t.Fatalf("over the limit: %d %q, handler ran %d times", w.Code, w.Body, served)
	}
	wantHeaders(t, "429", w.Header(), headers429Of(w.Header(), "1-per-1m", 1, 60))

	srv.Kill()
	w = get(r, "/closed")
	if w.Code != 503 || w.Body.String() != body503 || served != 1 {
		t.Fatalf("store down, fail-closed: %d %q, handler ran %d times", w.Code, w.Body, served)
	}
	wantHeaders(t, "503", w.Header(), map[string]string{"Content-Type": "application/problem+json", "Cache-Control": "no-store", "Retry-After": "1"})
}

// In an Fx app, Module registers the filter in httpfx's chain: the same
// answer, and fx.Decorate changes it.
func TestModule_ErrorFilterInHTTPChain_DecoratedTakesEffect(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for _, decorate := range []bool{false, true} {
		var server *httpfx.Server
		opts := []fx.Option{
			fx.NopLogger,
			fx.Provide(zap.NewNop),
			fx.Supply(&storefx.Config{URL: srv.URL()}, &Config{KeyPrefix: redistest.Prefix(t)}, &httpfx.Config{Addr: "127.0.0.1:0"}),
			storefx.Module, httpfx.Module, Module,
			fx.Provide(httpfx.AsRoutes(func(l *Limiter) httpfx.Routes {
				return func(r chi.Router) {
					r.With(l.Limit(Rule{Limit: 1, Window: time.Minute})).Get("/x", func(http.ResponseWriter, *http.Request) {})
				}
			})),
			fx.Populate(&server),
		}
		if decorate {
			opts = append(opts, fx.Decorate(func(next ErrorFilter) ErrorFilter {
				return func(err error, r *http.Request) (httpfx.Problem, bool) {
					p, ok := next(err, r)
					if ok {
						p.Type = "https://example.com/problems/" + p.Code
					}
					return p, ok
				}
			}))
		}
		app := fxtest.New(t, opts...)
		app.RequireStart()
		var resp *http.Response
		for range 2 {
			var err error
			if resp, err = http.Get(server.URL() + "/x"); err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != 429 {
				resp.Body.Close()
			}
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		app.RequireStop()
		want := body429
		if decorate {
			want = `{"type":"https://example.com/problems/rate_limit_exceeded","title":"Too Many Requests","status":429,"detail":"Rate limit exceeded","code":"rate_limit_exceeded"}` + "\n"
		}
		if resp.StatusCode != 429 || string(body) != want {
			t.Fatalf("decorated %v: %d %s, want 429 %s", decorate, resp.StatusCode, body, want)
		}
	}
}
