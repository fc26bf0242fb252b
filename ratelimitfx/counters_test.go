package ratelimitfx

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"

	"github.com/redisfx/redisfx/internal/redistest"
)

// get sends GET path to h from one client address and returns the answer.
func get(h http.Handler, path string) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, path, nil)
	req.RemoteAddr = "203.0.113.7:5555"
	h.ServeHTTP(w, req)
	return w
}

// Issue 15, item 9: r.Use(Limit(…)) inside a r.Route group runs before the
// group has routed (the pattern is still "/api/*"), yet each route of the
// group counts separately, as it does with r.With.
func TestMiddleware_RouteGroupCountsEachRouteSeparately(t *testing.T) {
	t.Parallel()
	l := newLimiter(t, redistest.Start(t), Config{})
	ok := func(http.ResponseWriter, *http.Request) {}
	r := chi.NewRouter()
	r.Route("/api", func(r chi.Router) {
		r.Use(l.Limit(Rule{Limit: 1, Window: time.Minute}))
		r.Get("/a", ok)
		r.Get("/b", ok)
		r.Route("/v1", func(r chi.Router) { r.Get("/items/{id}", ok) })
	})
	for i, tc := range []struct {
		path string
		want int
	}{
		{"/api/a", 200}, {"/api/b", 200}, {"/api/v1/items/1", 200},
		{"/api/a", 429}, {"/api/b", 429},
		{"/api/v1/items/2", 429}, // one route, whatever the id
	} {
		if w := get(r, tc.path); w.Code != tc.want {
			t.Fatalf("request %d, %s: %d, want %d", i+1, tc.path, w.Code, tc.want)
		}
	}
}

// Paths under a group that match no route share one counter: a client
// cannot get a fresh counter by inventing paths.
func TestMiddleware_RouteGroupUnmatchedPathsShareACounter(t *testing.T) {
	t.Parallel()
	l := newLimiter(t, redistest.Start(t), Config{})
	r := chi.NewRouter()
	r.Route("/api", func(r chi.Router) {
		r.Use(l.Limit(Rule{Limit: 1, Window: time.Minute}))
		r.Get("/a", func(http.ResponseWriter, *http.Request) {})
	})
	if w := get(r, "/api/nope-1"); w.Code != 404 {
		t.Fatalf("first unmatched path: %d, want 404", w.Code)
	}
	if w := get(r, "/api/nope-2"); w.Code != 429 {
		t.Fatalf("second unmatched path: %d, want 429 (one counter for every unmatched path)", w.Code)
	}
}

// ...nor by switching methods: the method was part of an unmatched path's
// counter name, so each of the nine methods chi routes got a counter of its
// own. A registered route's method not registered for it is unmatched too.
// (A method chi does not know, X0, is answered 405 by the root router
// before the group's middleware runs, and reaches no handler.)
func TestMiddleware_RouteGroupUnmatchedPathsShareACounterWhateverTheMethod(t *testing.T) {
	t.Parallel()
	l := newLimiter(t, redistest.Start(t), Config{})
	r := chi.NewRouter()
	r.Route("/api", func(r chi.Router) {
		r.Use(l.Limit(Rule{Limit: 1, Window: time.Minute}))
		r.Get("/a", func(http.ResponseWriter, *http.Request) {})
	})
	methods := []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete,
		http.MethodOptions, http.MethodTrace, http.MethodConnect, http.MethodHead}
	for i, m := range methods {
		for _, path := range []string{"/api/nope", "/api/a"} {
			if m == http.MethodGet && path == "/api/a" {
				continue // the route itself counts apart
			}
			w := httptest.NewRecorder()
			r.ServeHTTP(w, httptest.NewRequest(m, path, nil))
			if first := i == 0 && path == "/api/nope"; !first && w.Code != http.StatusTooManyRequests {
				t.Fatalf("%s %s: %d, want 429 (one counter for every unmatched path and method)", m, path, w.Code)
			}
		}
	}
	if w := get(r, "/api/a"); w.Code != http.StatusOK {
		t.Fatalf("GET /api/a, the group's route: %d, want 200 (a counter of its own)", w.Code)
	}
}

// Issue 15, item 10: two unnamed rules on one route (a burst limit and a
// sustained one) have a counter each. Sharing one, each request was counted
// twice and the 3-per-5s rule answered 429 with the 1-hour rule's expiry.
func TestMiddleware_TwoUnnamedRulesOnOneRouteCountSeparately(t *testing.T) {
	t.Parallel()
	l := newLimiter(t, redistest.Start(t), Config{})
	sustained := l.Limit(Rule{Limit: 100, Window: time.Hour})
	burst := l.Limit(Rule{Limit: 3, Window: 5 * time.Second})
	r := chi.NewRouter()
	r.With(sustained, burst).Get("/x", func(http.ResponseWriter, *http.Request) {})
	for i, want := range []int{200, 200, 200, 429} {
		w := get(r, "/x")
		if w.Code != want {
			t.Fatalf("request %d: %d, want %d", i+1, w.Code, want)
		}
		if want == 429 {
			// The burst rule refused: it frees capacity within its own 5 s.
			if ra, err := strconv.Atoi(w.Header().Get("Retry-After")); err != nil || ra < 1 || ra > 5 {
				t.Fatalf("Retry-After %q, want 1..5 (the burst rule's window)", w.Header().Get("Retry-After"))
			}
		}
	}
}

// Rules that differ in anything that matters — name, limit, window, or the
// algorithm of the limiter checking them — never share a counter: using up
// one leaves the other untouched.
func TestCheck_DistinctRulesNeverShareACounter(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	prefix := redistest.Prefix(t)
	fixed := newLimiter(t, srv, Config{KeyPrefix: prefix})
	sliding := newLimiter(t, srv, Config{KeyPrefix: prefix, Algorithm: SlidingLog})
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		la, lb *Limiter
		a, b   Rule
	}{
		{"unnamed, other limit and window", fixed, fixed, Rule{Limit: 2, Window: time.Hour}, Rule{Limit: 3, Window: time.Second}},
		{"unnamed, other window", fixed, fixed, Rule{Limit: 2, Window: time.Hour}, Rule{Limit: 2, Window: time.Minute}},
		{"same name, other limit", fixed, fixed, Rule{Name: "api", Limit: 2, Window: time.Hour}, Rule{Name: "api", Limit: 3, Window: time.Hour}},
		{"same rule, other algorithm", fixed, sliding, Rule{Name: "alg", Limit: 2, Window: time.Hour}, Rule{Name: "alg", Limit: 2, Window: time.Hour}},
	} {
		key := "client:" + tc.name
		for i := range 3 { // a's limit is 2: the third is refused
			d, err := tc.la.Check(ctx, tc.a, key)
			if err != nil || d.Allowed != (i < 2) {
				t.Fatalf("%s: rule a, check %d: %+v %v", tc.name, i+1, d, err)
			}
		}
		d, err := tc.lb.Check(ctx, tc.b, key)
		if err != nil || !d.Allowed || d.Current != 1 {
			t.Fatalf("%s: rule b's first check after a was used up: %+v %v, want allowed with Current 1", tc.name, d, err)
		}
	}
}

// A counter's name cannot be forged by a rule name or a client key that
// contains the separator, and a route pattern's "{id}" is not a Cluster
// hash tag (which would put every client of the route on one slot).
func TestCounterKey_UnambiguousAndWithoutRouteHashTags(t *testing.T) {
	l, err := New(unconnected(t), Config{})
	if err != nil {
		t.Fatal(err)
	}
	rule := func(name string) Rule { return l.withDefaults(Rule{Name: name}) }
	if a, b := l.counterKey(rule("a"), "b:c"), l.counterKey(rule("a:b"), "c"); a == b {
		t.Fatalf("rule a with key b:c and rule a:b with key c share %q", a)
	}
	if a, b := l.counterKey(rule(`a"`), "b"), l.counterKey(rule("a"), `"b`); a == b {
		t.Fatalf("quotes: both %q", a)
	}
	k := l.counterKey(rule("GET /items/{id}"), "ip:203.0.113.7")
	if strings.ContainsAny(k, "{}") {
		t.Fatalf("%q carries the route's braces: a hash tag", k)
	}
	if want := `ratelimit:fixed-window:100-per-60000ms:"GET /items/\x7bid\x7d":ip:203.0.113.7`; k != want {
		t.Fatalf("counter key %q, want %q", k, want)
	}
}

// A route the router takes for every method (HandleFunc) has one counter
// for all of them: an unnamed rule's counter was named "<method> <route>",
// and a client got Limit requests per method, 9× the limit on a login
// route. Routes of one method keep a counter each ("GET /a", "POST /a").
func TestMiddleware_AnyMethodRouteCountsAllMethodsTogether(t *testing.T) {
	t.Parallel()
	l := newLimiter(t, redistest.Start(t), Config{KeyPrefix: redistest.Prefix(t)})
	r := chi.NewRouter()
	limited := r.With(l.Limit(Rule{Limit: 5, Window: time.Minute}))
	limited.HandleFunc("/login", func(http.ResponseWriter, *http.Request) {})
	limited.Get("/a", func(http.ResponseWriter, *http.Request) {})
	limited.Post("/a", func(http.ResponseWriter, *http.Request) {})
	send := func(method, path string) int {
		w := httptest.NewRecorder()
		req := httptest.NewRequest(method, path, nil)
		req.RemoteAddr = "203.0.113.7:1234"
		r.ServeHTTP(w, req)
		return w.Code
	}
	allowed := 0
	for _, m := range []string{"GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "CONNECT", "HEAD"} {
		for range 10 {
			if send(m, "/login") != http.StatusTooManyRequests {
				allowed++
			}
		}
	}
	if allowed != 5 {
		t.Fatalf("limit 5 on a route of every method: %d of 90 requests allowed", allowed)
	}
	for _, m := range []string{"GET", "POST"} {
		n := 0
		for range 7 {
			if send(m, "/a") != http.StatusTooManyRequests {
				n++
			}
		}
		if n != 5 {
			t.Fatalf("%s /a: %d of 7 allowed, want its own 5", m, n)
		}
	}
}

// Found by an adversary (helper-77): the limiter asked the router for the
// request's own path where chi routes a path a middleware rewrote
// (StripSlashes, CleanPath), and named the counter after the request's
// method where chi's GetHead routes a HEAD as a GET. Both gave one client
// the route's limit twice per window: /api/orders/ reached GET /orders but
// counted on the group's unmatched counter; a HEAD ran the GET handler but
// counted on "HEAD /orders". Each route counts once, whatever the spelling
// of the path or the method chi routes it by, in a group (r.Use) and on
// the route (r.With).
func TestMiddleware_CountsTheRouteChiTakes(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	send := func(h http.Handler, method, path string) int {
		w := httptest.NewRecorder()
		req := httptest.NewRequest(method, path, nil)
		req.RemoteAddr = "203.0.113.7:5555"
		h.ServeHTTP(w, req)
		return w.Code
	}
	for _, c := range []struct {
		name     string
		rewrite  func(http.Handler) http.Handler
		requests [][2]string // method, path: all reach GET /api/orders
	}{
		{"StripSlashes", middleware.StripSlashes, [][2]string{{"GET", "/api/orders"}, {"GET", "/api/orders/"}}},
		{"CleanPath", middleware.CleanPath, [][2]string{{"GET", "/api/orders"}, {"GET", "/api//orders"}}},
		{"GetHead", middleware.GetHead, [][2]string{{"GET", "/api/orders"}, {"HEAD", "/api/orders"}}},
	} {
		for _, inGroup := range []bool{true, false} {
			l := newLimiter(t, srv, Config{KeyPrefix: redistest.Prefix(t) + c.name + strconv.FormatBool(inGroup) + ":"})
			ran := 0
			handler := func(http.ResponseWriter, *http.Request) { ran++ }
			r := chi.NewRouter()
			r.Use(c.rewrite)
			r.Route("/api", func(r chi.Router) {
				if inGroup {
					r.Use(l.Limit(Rule{Limit: 3, Window: time.Minute}))
					r.Get("/orders", handler)
				} else {
					r.With(l.Limit(Rule{Limit: 3, Window: time.Minute})).Get("/orders", handler)
				}
			})
			var codes []int
			for _, req := range c.requests {
				for range 4 {
					codes = append(codes, send(r, req[0], req[1]))
				}
			}
			if ran != 3 {
				t.Errorf("%s, limiter in the group %v: the handler ran %d times in one window with Limit 3 (answers %v)", c.name, inGroup, ran, codes)
			}
		}
	}
}

// Found by an adversary (helper-79): the routers below a group's mount
// points were cached by the mount patterns alone, so with one Limiter (the
// module provides one) in two routers whose groups share a pattern, the
// second router's requests were looked up in the first router's group:
// named after its routes, or its unmatched counter, and a client of the
// second router's one route got more than its limit.
func TestMiddleware_OneLimiterInTwoRouters(t *testing.T) {
	t.Parallel()
	l := newLimiter(t, redistest.Start(t), Config{})
	rule := Rule{Limit: 2, Window: time.Minute}
	first := chi.NewRouter()
	first.Route("/api", func(r chi.Router) {
		r.Use(l.Limit(rule))
		r.Get("/a", func(http.ResponseWriter, *http.Request) {})
		r.Get("/b", func(http.ResponseWriter, *http.Request) {})
	})
	ran := 0
	second := chi.NewRouter()
	second.Route("/api", func(r chi.Router) {
		r.Use(l.Limit(rule))
		r.Get("/{name}", func(http.ResponseWriter, *http.Request) { ran++ })
	})
	get(first, "/api/a") // the first router's group is looked up first
	for _, p := range []string{"/api/a", "/api/b", "/api/c", "/api/d"} {
		for range 3 {
			get(second, p)
		}
	}
	if ran != 2 {
		t.Fatalf("the second router's GET /api/{name} ran %d times for one client with Limit 2", ran)
	}
}

// Found by an adversary (helper-80): whether a route takes every method was
// cached by pattern alone, so after a first router's GET /login, a second
// router's Handle("/login") (every method) was named per method, and one
// client got its limit once per method.
func TestMiddleware_OneLimiterInTwoRouters_EveryMethodPerRouter(t *testing.T) {
	t.Parallel()
	l := newLimiter(t, redistest.Start(t), Config{})
	rule := Rule{Limit: 2, Window: time.Minute}
	first := chi.NewRouter()
	first.With(l.Limit(rule)).Get("/login", func(http.ResponseWriter, *http.Request) {})
	ran := 0
	second := chi.NewRouter()
	second.With(l.Limit(rule)).Handle("/login", http.HandlerFunc(func(http.ResponseWriter, *http.Request) { ran++ }))
	get(first, "/login")
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete} {
		for range 2 {
			w := httptest.NewRecorder()
			req := httptest.NewRequest(m, "/login", nil)
			req.RemoteAddr = "203.0.113.7:5555"
			second.ServeHTTP(w, req)
		}
	}
	if ran != 2 {
		t.Fatalf("the second router's Handle(/login) ran %d times for one client with Limit 2", ran)
	}
}

// A route whose router the limiter cannot find below its mount points
// (review: the routing came back empty) is still named after the method
// chi routes it by, not after an empty one.
func TestCounterName_RouterNotFound_NamedAfterTheMethod(t *testing.T) {
	t.Parallel()
	l := newLimiter(t, redistest.Start(t), Config{})
	rc := chi.NewRouteContext()
	rc.Routes = chi.NewRouter() // mounts nothing at /legacy/*
	rc.RoutePatterns = []string{"/legacy/*", "/x"}
	r := httptest.NewRequest(http.MethodPost, "/legacy/x", nil)
	r = r.WithContext(context.WithValue(r.Context(), chi.RouteCtxKey, rc))
	route, routed, at := l.routeOf(r)
	if name := l.counterName(route, at); !routed || name != "POST /legacy/x" {
		t.Fatalf("counter %q (routed %v), want \"POST /legacy/x\"", name, routed)
	}
}
