package httpfx_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/redisfx/redisfx"
	"github.com/redisfx/redisfx/httpfx"
	"github.com/redisfx/redisfx/internal/redistest"
	"github.com/redisfx/redisfx/storefx"
	"github.com/redisfx/redisfx/tracingfx"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var errTeapot = errors.New("teapot")

func app(t *testing.T, extra ...fx.Option) (*fxtest.App, *httpfx.Server, *observer.ObservedLogs) {
	t.Helper()
	core, logs := observer.New(zap.InfoLevel)
	var srv *httpfx.Server
	reg := prometheus.NewRegistry()
	a := fxtest.New(t, append([]fx.Option{
		fx.NopLogger,
		fx.Supply(zap.New(core)),
		fx.Supply(&httpfx.Config{Addr: "127.0.0.1:0", ShutdownTimeout: 5 * time.Second}),
		fx.Provide(func() prometheus.Registerer { return reg }, func() prometheus.Gatherer { return reg }),
		httpfx.Module,
		fx.Provide(httpfx.AsRoutes(func() httpfx.Routes {
			return func(r chi.Router) {
				r.Get("/items/{id}", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, chi.URLParam(r, "id")) })
				r.Method("GET", "/fail", httpfx.HandlerFunc(func(http.ResponseWriter, *http.Request) error { return errors.New("db password=hunter2") }))
				r.Method("GET", "/teapot", httpfx.HandlerFunc(func(http.ResponseWriter, *http.Request) error { return errTeapot }))
				r.Get("/panic", func(http.ResponseWriter, *http.Request) { panic("boom") })
			}
		})),
		fx.Populate(&srv),
	}, extra...)...)
	a.RequireStart()
	return a, srv, logs
}

func get(t *testing.T, url string) (int, http.Header, string) {
	t.Helper()
	r, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	return r.StatusCode, r.Header, string(b)
}

func TestRoutes_ErrorsBecomeProblems(t *testing.T) {
	t.Parallel()
	a, srv, logs := app(t, fx.Provide(httpfx.AsErrorFilter("teapots", func(err error, r *http.Request) (httpfx.Problem, bool) {
		if errors.Is(err, errTeapot) {
			return httpfx.NewProblem(http.StatusTeapot, "teapot", "short and stout"), true
		}
		return httpfx.Problem{}, false
	})))
	defer a.RequireStop()
	if code, _, body := get(t, srv.URL()+"/items/7"); code != 200 || body != "7" {
		t.Fatalf("route: %d %q", code, body)
	}
	code, h, body := get(t, srv.URL()+"/fail")
	if code != 500 || h.Get("Content-Type") != httpfx.ProblemContentType || strings.Contains(body, "hunter2") {
		t.Fatalf("unmapped error: %d %s %q", code, h.Get("Content-Type"), body)
	}
	if logs.FilterMessage("unhandled error").Len() != 1 {
		t.Fatal("the unmapped error was not logged")
	}
	if code, _, body := get(t, srv.URL()+"/teapot"); code != 418 || !strings.Contains(body, `"code":"teapot"`) {
		t.Fatalf("app filter: %d %s", code, body)
	}
	if code, _, body := get(t, srv.URL()+"/panic"); code != 500 || !strings.Contains(body, "internal_error") {
		t.Fatalf("panic: %d %s", code, body)
	}
	if code, h, _ := get(t, srv.URL()+"/nowhere"); code != 404 || h.Get("Content-Type") != httpfx.ProblemContentType {
		t.Fatalf("404: %d", code)
	}
}

// A scanner sending methods HTTP does not define (to unknown paths and to
// known ones) cannot grow the metrics' cardinality: such methods share the
// label _OTHER, as in OpenTelemetry's HTTP conventions.
func TestMetrics_UnknownMethodsCollapsed(t *testing.T) {
	t.Parallel()
	a, srv, _ := app(t)
	defer a.RequireStop()
	for i := range 30 {
		for _, path := range []string{"/random", "/items/1"} {
			req, _ := http.NewRequest(fmt.Sprintf("SCAN%d", i), srv.URL()+path, nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
		}
	}
	_, _, metrics := get(t, srv.URL()+"/metrics")
	if strings.Contains(metrics, "SCAN") || !strings.Contains(metrics, `method="_OTHER"`) {
		t.Fatalf("unknown methods became labels:\n%s", metrics)
	}
}

// Made-up methods do not name SERVER spans either (a tracing backend lists
// operations by span name): the name is "HTTP", the method is kept in
// http.request.method_original.
func TestSpans_UnknownMethodNamedHTTP(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	a, srv, _ := app(t, fx.Provide(func() trace.TracerProvider { return tp }))
	req, _ := http.NewRequest("SCAN7", srv.URL()+"/items/1", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	get(t, srv.URL()+"/items/2")
	a.RequireStop()
	var got []string
	for _, s := range exp.GetSpans() {
		got = append(got, s.Name)
		if s.Name == "HTTP" && !strings.Contains(fmt.Sprint(s.Attributes), "SCAN7") {
			t.Errorf("the method is not kept in an attribute: %v", s.Attributes)
		}
	}
	if fmt.Sprint(got) != "[HTTP GET /items/{id}]" {
		t.Fatalf("span names %v", got)
	}
}

func TestMetrics_LabelledByRoutePattern_UnmatchedCollapsed(t *testing.T) {
	t.Parallel()
	a, srv, logs := app(t)
	defer a.RequireStop()
	for _, p := range []string{"/items/1", "/items/2", "/random/a", "/random/b"} {
		get(t, srv.URL()+p)
	}
	_, _, metrics := get(t, srv.URL()+"/metrics")
	if !strings.Contains(metrics, `http_requests_total{code="200",method="GET",route="/items/{id}"} 2`) {
		t.Fatalf("route label missing:\n%s", metrics)
	}
	if !strings.Contains(metrics, `route="unmatched"} 2`) || strings.Contains(metrics, "/random") {
		t.Fatalf("unmatched paths not collapsed:\n%s", metrics)
	}
	entry := logs.FilterMessage("request").All()[0].ContextMap()
	if entry["route"] != "/items/{id}" || entry["request_id"] == "" {
		t.Fatalf("access log %v", entry)
	}
}

func TestHealthAndReadiness(t *testing.T) {
	t.Parallel()
	var healthy atomic.Bool
	healthy.Store(true)
	a, srv, _ := app(t, fx.Provide(fx.Annotate(func() httpfx.ReadinessCheck {
		return httpfx.ReadinessCheck{Name: "db", Check: func(context.Context) error {
			if healthy.Load() {
				return nil
			}
			return errors.New("down")
		}}
	}, fx.ResultTags(`group:"redisfx.http.readiness"`))))
	defer a.RequireStop()
	if code, _, _ := get(t, srv.URL()+"/healthz"); code != 200 {
		t.Fatal("healthz")
	}
	if code, _, _ := get(t, srv.URL()+"/readyz"); code != 200 {
		t.Fatal("readyz")
	}
	healthy.Store(false)
	code, h, body := get(t, srv.URL()+"/readyz")
	var p httpfx.Problem
	if err := json.Unmarshal([]byte(body), &p); err != nil || code != 503 || h.Get("Content-Type") != httpfx.ProblemContentType ||
		p.Status != 503 || p.Code != httpfx.CodeNotReady || fmt.Sprint(p.Extensions["failed"]) != "[db]" || h.Get("Cache-Control") != "no-store" {
		t.Fatalf("readyz down: %d %s %s (%v)", code, h, body, err)
	}
}

func TestEndpointsCanBeTurnedOff(t *testing.T) {
	t.Parallel()
	var srv *httpfx.Server
	a := fxtest.New(t, fx.NopLogger, fx.Provide(zap.NewNop),
		fx.Supply(&httpfx.Config{Addr: "127.0.0.1:0", DisableHealth: true, DisableReady: true, DisableMetrics: true}),
		httpfx.Module, fx.Populate(&srv))
	a.RequireStart()
	defer a.RequireStop()
	for _, p := range []string{"/healthz", "/readyz", "/metrics"} {
		if code, _, _ := get(t, srv.URL()+p); code != 404 {
			t.Errorf("%s still mounted: %d", p, code)
		}
	}
}

func TestTakenPortFailsStartClearly(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	a := fx.New(fx.NopLogger, fx.Provide(zap.NewNop), fx.Supply(&httpfx.Config{Addr: l.Addr().String()}), httpfx.Module)
	err = a.Start(context.Background())
	if err == nil || !strings.Contains(err.Error(), "cannot listen on "+l.Addr().String()) {
		t.Fatalf("err = %v", err)
	}
}

func TestStopDrainsInFlightRequests(t *testing.T) {
	t.Parallel()
	entered := make(chan struct{})
	a, srv, _ := app(t, fx.Provide(httpfx.AsRoutes(func() httpfx.Routes {
		return func(r chi.Router) {
			r.Get("/slow", func(w http.ResponseWriter, r *http.Request) {
				close(entered)
				time.Sleep(300 * time.Millisecond)
				_, _ = io.WriteString(w, "done")
			})
		}
	})))
	got := make(chan string)
	go func() { _, _, body := get(t, srv.URL()+"/slow"); got <- body }()
	<-entered
	a.RequireStop()
	if body := <-got; body != "done" {
		t.Fatalf("in-flight request cut: %q", body)
	}
}

func TestConfig_NegativeTimeoutFailsNamingTheField(t *testing.T) {
	t.Parallel()
	a := fx.New(fx.NopLogger, fx.Provide(zap.NewNop), fx.Supply(&httpfx.Config{IdleTimeout: -1}), httpfx.Module)
	if err := a.Err(); err == nil || !strings.Contains(err.Error(), "IdleTimeout") {
		t.Fatalf("err = %v", err)
	}
}

// An invalid httpfx.Config failed fx.New with a plain error, where every
// other module's is a *redisfx.ConfigError naming the field (and Config had
// no Validate). Both now hold, for every field that can be invalid.
func TestConfig_InvalidIsConfigErrorNamingTheField(t *testing.T) {
	t.Parallel()
	for field, cfg := range map[string]httpfx.Config{
		"ReadHeaderTimeout": {ReadHeaderTimeout: -1},
		"ReadTimeout":       {ReadTimeout: -time.Second},
		"WriteTimeout":      {WriteTimeout: -1},
		"IdleTimeout":       {IdleTimeout: -1},
		"ShutdownTimeout":   {ShutdownTimeout: -1},
		"MaxHeaderBytes":    {MaxHeaderBytes: -1},
	} {
		for how, err := range map[string]error{
			"Validate": cfg.Validate(),
			"fx.New":   fx.New(fx.NopLogger, fx.Provide(zap.NewNop), fx.Supply(&cfg), httpfx.Module).Err(),
		} {
			var ce *redisfx.ConfigError
			if !errors.As(err, &ce) || ce.Package != "httpfx" || ce.Field != "Config."+field ||
				!strings.Contains(err.Error(), "httpfx: invalid Config."+field+": ") {
				t.Errorf("%s of a negative %s: %v", how, field, err)
			}
		}
	}
	if err := (httpfx.Config{}).Validate(); err != nil {
		t.Errorf("the zero Config: %v", err)
	}
}

func TestRequestIDFromContext(t *testing.T) {
	seen := make(chan string, 2)
	a, srv, _ := app(t, fx.Provide(httpfx.AsRoutes(func() httpfx.Routes {
		return func(r chi.Router) {
			r.Get("/id", func(w http.ResponseWriter, r *http.Request) { seen <- httpfx.RequestIDFromContext(r.Context()) })
		}
	})))
	defer a.RequireStop()
	req, _ := http.NewRequest("GET", srv.URL()+"/id", nil)
	req.Header.Set("X-Request-Id", "client-chosen-1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if id := <-seen; id != "client-chosen-1" {
		t.Fatalf("handler saw %q, want the client's id", id)
	}
	// Generated ids: 24 hex digits, one per request, and a string kept
	// from an earlier request never changes (its digits live in that
	// request's state, never written again).
	generated := map[string]bool{}
	var kept []string
	for range 50 {
		_, h, _ := get(t, srv.URL()+"/id")
		id := <-seen
		if id != h.Get("X-Request-Id") || !regexp.MustCompile(`^[0-9a-f]{24}$`).MatchString(id) || generated[id] {
			t.Fatalf("handler saw %q, response header %q, seen before: %v", id, h.Get("X-Request-Id"), generated[id])
		}
		generated[id] = true
		kept = append(kept, id)
	}
	for _, id := range kept {
		if !generated[id] {
			t.Fatalf("a kept id changed to %q", id)
		}
	}
	if id := httpfx.RequestIDFromContext(context.Background()); id != "" {
		t.Fatalf("outside a request: %q", id)
	}
}

func TestMissingLoggerNamesWhatToProvide(t *testing.T) {
	err := fx.New(fx.NopLogger, httpfx.Module).Err()
	want := "httpfx.Module needs a *zap.Logger: provide one, e.g. fx.Provide(zap.NewProduction)"
	if err == nil || !strings.HasSuffix(err.Error(), want) {
		t.Fatalf("error %v\nwant one ending %q", err, want)
	}
}

func TestConfigByValue(t *testing.T) {
	var srv *httpfx.Server
	a := fxtest.New(t, fx.NopLogger, fx.Supply(zap.NewNop()), httpfx.Module,
		fx.Supply(httpfx.Config{Addr: "127.0.0.1:0"}), fx.Populate(&srv))
	a.RequireStart()
	defer a.RequireStop()
	if !strings.HasPrefix(srv.Addr(), "127.0.0.1:") || strings.HasSuffix(srv.Addr(), ":8080") {
		t.Fatalf("listening on %s: a Config supplied by value was ignored", srv.Addr())
	}
}

func TestAppReadinessCheck(t *testing.T) {
	var ready atomic.Bool
	a, srv, _ := app(t, fx.Provide(httpfx.AsReadinessCheck(func() httpfx.ReadinessCheck {
		return httpfx.ReadinessCheck{Name: "ledger", Check: func(context.Context) error {
			if !ready.Load() {
				return errors.New("ledger not loaded")
			}
			return nil
		}}
	})))
	defer a.RequireStop()
	if code, _, body := get(t, srv.URL()+"/readyz"); code != 503 || !strings.Contains(body, `"ledger"`) {
		t.Fatalf("not ready: %d %s", code, body)
	}
	ready.Store(true)
	if code, _, body := get(t, srv.URL()+"/readyz"); code != 200 {
		t.Fatalf("ready: %d %s", code, body)
	}
}

// Health, readiness and metrics probes make no SERVER span and no Redis
// command span, and their access log lines are at debug level: a probe
// every few seconds is not a trace anyone reads.
func TestProbes_NotTraced_LoggedAtDebug(t *testing.T) {
	t.Parallel()
	rds := redistest.Start(t)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	debug, debugLogs := observer.New(zap.DebugLevel)
	a, srv, logs := app(t,
		tracingfx.Module, tracingfx.UseTracerProvider(func() *sdktrace.TracerProvider { return tp }),
		fx.Supply(storefx.Config{URL: rds.URL()}), storefx.Module,
		fx.Decorate(func(l *zap.Logger) *zap.Logger { return zap.New(zapcore.NewTee(l.Core(), debug)) }))
	for _, path := range []string{"/healthz", "/readyz", "/metrics", "/items/7"} {
		if code, _, _ := get(t, srv.URL()+path); code != 200 {
			t.Fatalf("%s: %d", path, code)
		}
	}
	a.RequireStop()
	var names []string
	for _, s := range exp.GetSpans() {
		names = append(names, s.Name)
	}
	if len(names) != 1 || names[0] != "GET /items/{id}" {
		t.Fatalf("spans %v, want only the request's", names)
	}
	for _, e := range logs.FilterMessage("request").All() {
		if e.ContextMap()["route"] != "/items/{id}" {
			t.Fatalf("a probe logged at info: %v", e.ContextMap())
		}
	}
	if n := debugLogs.FilterMessage("request").FilterLevelExact(zap.DebugLevel).Len(); n != 3 {
		t.Fatalf("%d probe lines at debug, want 3", n)
	}
}

// A request no route serves gets a problem: 404 for an unknown path, 405
// with the Allow header RFC 9110 requires for a known path and another
// method, also inside a mounted sub-router.
func TestUnmatched_ProblemsAndAllow(t *testing.T) {
	t.Parallel()
	a, srv, _ := app(t, fx.Provide(httpfx.AsRoutes(func() httpfx.Routes {
		return func(r chi.Router) {
			r.Route("/orders", func(r chi.Router) {
				r.Post("/", func(http.ResponseWriter, *http.Request) {})
				r.Put("/{id}", func(http.ResponseWriter, *http.Request) {})
				r.Delete("/{id}", func(http.ResponseWriter, *http.Request) {})
			})
		}
	})))
	defer a.RequireStop()
	for _, c := range []struct {
		method, path string
		status       int
		code, allow  string
	}{
		{"GET", "/nowhere", 404, httpfx.CodeNotFound, ""},
		{"POST", "/items/7", 405, httpfx.CodeMethodNotAllowed, "GET"},
		{"DELETE", "/healthz", 405, httpfx.CodeMethodNotAllowed, "GET"},
		{"GET", "/orders/9", 405, httpfx.CodeMethodNotAllowed, "PUT, DELETE"},
		{"GET", "/orders/", 405, httpfx.CodeMethodNotAllowed, "POST"},
		// Methods chi does not know go to its 405 handler whatever the path.
		{"BREW", "/nowhere", 404, httpfx.CodeNotFound, ""},
		{"BREW", "/items/7", 405, httpfx.CodeMethodNotAllowed, "GET"},
	} {
		req, _ := http.NewRequest(c.method, srv.URL()+c.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var p httpfx.Problem
		err = json.NewDecoder(resp.Body).Decode(&p)
		resp.Body.Close()
		if err != nil || resp.StatusCode != c.status || p.Code != c.code || resp.Header.Get("Content-Type") != httpfx.ProblemContentType ||
			resp.Header.Get("Allow") != c.allow {
			t.Errorf("%s %s: %d %q Allow %q (%v); want %d %q Allow %q", c.method, c.path, resp.StatusCode, p.Code, resp.Header.Get("Allow"), err, c.status, c.code, c.allow)
		}
	}
}

// A handler error that is the client going away (context.Canceled, the
// request's context done) is logged and counted as 499, nginx's "client
// closed request", not as the implicit 200 of a handler that wrote nothing.
func TestClientGone_HandlerErrorLoggedAndCountedAs499(t *testing.T) {
	t.Parallel()
	entered := make(chan struct{})
	a, srv, logs := app(t, fx.Provide(httpfx.AsRoutes(func() httpfx.Routes {
		return func(r chi.Router) {
			r.Method("POST", "/charge", httpfx.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) error {
				close(entered)
				<-r.Context().Done()
				return r.Context().Err()
			}))
		}
	})))
	defer a.RequireStop()
	c, err := net.Dial("tcp", strings.TrimPrefix(srv.URL(), "http://"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(c, "POST /charge HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	<-entered
	_ = c.Close()
	accessLogged(t, logs, zap.String("route", "/charge"), 1)
	if n := logs.FilterMessage("request").FilterField(zap.Int("status", httpfx.StatusClientClosedRequest)).Len(); n != 1 {
		t.Fatalf("%d access log lines with status 499, want 1", n)
	}
	if _, _, metrics := get(t, srv.URL()+"/metrics"); !strings.Contains(metrics, `code="499"`) {
		t.Fatalf("no 499 in the request metrics:\n%s", metrics)
	}
}

// A handler that passes an invalid status makes net/http panic before it
// sends anything, but chi's writer wrap had taken the status as written
// and would drop the recovery's 500: the client got an implicit 200 with a
// problem body saying 500 (found by an adversary). The answer, the access
// log and the metrics now all say 500, and the log's bytes are the
// problem's (they said 0 while the recovery wrote past the wrap: found by
// another adversary).
func TestRecovery_InvalidStatusIsA500(t *testing.T) {
	t.Parallel()
	a, srv, logs := app(t, fx.Provide(httpfx.AsRoutes(func() httpfx.Routes {
		return func(r chi.Router) {
			r.Get("/zero", func(w http.ResponseWriter, _ *http.Request) {
				var upstreamStatus int // the upstream call failed: its status is the zero value
				w.WriteHeader(upstreamStatus)
				_, _ = io.WriteString(w, "charged")
			})
		}
	})))
	defer a.RequireStop()
	code, h, body := get(t, srv.URL()+"/zero")
	if code != http.StatusInternalServerError || h.Get("Content-Type") != httpfx.ProblemContentType || !strings.Contains(body, "internal_error") {
		t.Fatalf("answered %d %s %q, want a 500 problem", code, h.Get("Content-Type"), body)
	}
	if logs.FilterMessage("handler panicked").Len() != 1 {
		t.Fatal("the panic was not logged")
	}
	if logs.FilterMessage("request").FilterField(zap.Int("status", 500)).FilterField(zap.Int64("bytes", int64(len(body)))).Len() != 1 {
		t.Fatalf("the access log does not say 500 and %d bytes: %v", len(body), logs.FilterMessage("request").All())
	}
	if _, _, metrics := get(t, srv.URL()+"/metrics"); !strings.Contains(metrics, `http_requests_total{code="500",method="GET",route="/zero"} 1`) {
		t.Fatalf("the metrics do not count a 500:\n%s", metrics)
	}
}

// When a middleware writes while the panic unwinds (a timeout's deferred
// 504, a compressor's footer), an answer has gone out that the recovery
// can no longer replace: an error answer stands, and the access log and
// the metrics say what was sent, never a 500 the client did not get (found
// by an adversary); a success (the compressor's empty 200) is aborted, so
// that the client cannot take it for the handler's answer, and recorded as
// an aborted 500.
func TestRecovery_AnswerSentWhileUnwinding_LoggedAsSent(t *testing.T) {
	t.Parallel()
	a, srv, logs := app(t,
		fx.Provide(httpfx.AsMiddleware(func() httpfx.Middleware {
			return httpfx.Middleware{Name: "compress", Order: 10, Wrap: middleware.Compress(5)}
		})),
		fx.Provide(httpfx.AsRoutes(func() httpfx.Routes {
			return func(r chi.Router) {
				r.Get("/compressed", func(w http.ResponseWriter, _ *http.Request) {
					w.Header().Set("Content-Type", "application/json")
					var upstreamStatus int
					w.WriteHeader(upstreamStatus)
				})
				r.With(func(next http.Handler) http.Handler { // a timeout's deferred answer
					return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
						defer w.WriteHeader(http.StatusGatewayTimeout)
						next.ServeHTTP(w, r)
					})
				}).Get("/late", func(http.ResponseWriter, *http.Request) {
					// what idempotencyfx's recorder raises, having sent nothing
					panic(fmt.Sprintf("invalid WriteHeader code %v", 0))
				})
			}
		})))
	defer a.RequireStop()
	client := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	defer client.CloseIdleConnections()
	seen := map[string]int{}
	for _, c := range []struct{ path, encoding string }{{"/compressed", "gzip"}, {"/compressed", ""}, {"/late", ""}} {
		req, _ := http.NewRequest(http.MethodGet, srv.URL()+c.path, nil)
		if c.encoding != "" {
			req.Header.Set("Accept-Encoding", c.encoding)
		}
		resp, err := client.Do(req)
		seen[c.path]++
		if c.encoding == "gzip" {
			if err == nil {
				resp.Body.Close()
				t.Fatalf("%s (gzip): the compressor's 200 after the panic reached the client as %d", c.path, resp.StatusCode)
			}
			lines := accessLogged(t, logs, zap.String("path", c.path), seen[c.path])
			if m := lines[len(lines)-1].ContextMap(); m["status"] != int64(500) || m["aborted"] != true {
				t.Fatalf("%s (gzip): aborted, logged %v", c.path, m)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		lines := accessLogged(t, logs, zap.String("path", c.path), seen[c.path])
		if logged := lines[len(lines)-1].ContextMap()["status"]; logged != int64(resp.StatusCode) {
			t.Fatalf("%s (Accept-Encoding %q): the client got %d, the access log says %v", c.path, c.encoding, resp.StatusCode, logged)
		}
		if c.encoding == "" && c.path == "/compressed" && resp.StatusCode != http.StatusInternalServerError {
			t.Fatalf("%s without compression: %d, want the recovery's 500", c.path, resp.StatusCode)
		}
	}
}

// A handler that began a success and then panicked: the client got the
// handler's 200 with the 500 problem's JSON appended to the partial body,
// complete and without a transport error, and the access log said 200
// (found by an adversary). The connection is aborted, and the request is
// recorded as an aborted 500.
func TestRecovery_PanicAfterTheAnswerBegan_AbortsTheConnection(t *testing.T) {
	t.Parallel()
	a, srv, logs := app(t, fx.Provide(httpfx.AsRoutes(func() httpfx.Routes {
		return func(r chi.Router) {
			r.Get("/partial", func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				_, _ = io.WriteString(w, `{"payment":"p-1","status":`)
				panic("boom after writing")
			})
		}
	})))
	defer a.RequireStop()
	resp, err := http.Get(srv.URL() + "/partial")
	if err == nil {
		body, rerr := io.ReadAll(resp.Body)
		resp.Body.Close()
		if rerr == nil {
			t.Fatalf("the client read a complete %d answer: %q", resp.StatusCode, body)
		}
	}
	recordedAborted(t, srv, logs, "/partial")
	if n := logs.FilterMessage("handler panicked").Len(); n != 1 {
		t.Fatalf("'handler panicked' logged %d times", n)
	}
}

// A handler that panics with http.ErrAbortHandler (net/http's way to abort
// a response) reached the route yet left no access log line and no count.
func TestRecovery_AbortHandlerPanic_LoggedAndCounted(t *testing.T) {
	t.Parallel()
	a, srv, logs := app(t, fx.Provide(httpfx.AsRoutes(func() httpfx.Routes {
		return func(r chi.Router) {
			r.Get("/abort", func(http.ResponseWriter, *http.Request) { panic(http.ErrAbortHandler) })
		}
	})))
	defer a.RequireStop()
	if resp, err := http.Get(srv.URL() + "/abort"); err == nil {
		resp.Body.Close()
		t.Fatalf("an aborted handler answered %d", resp.StatusCode)
	}
	recordedAborted(t, srv, logs, "/abort")
}

// recordedAborted checks that the request to path was logged as an aborted
// 500 and counted as a 500 of its route.
func recordedAborted(t *testing.T, srv interface{ URL() string }, logs *observer.ObservedLogs, path string) {
	t.Helper()
	m := accessLogged(t, logs, zap.String("path", path), 1)[0].ContextMap()
	if m["status"] != int64(500) || m["aborted"] != true || m["route"] != path {
		t.Fatalf("access log %v, want status 500, aborted, route %s", m, path)
	}
	if _, _, metrics := get(t, srv.URL()+"/metrics"); !strings.Contains(metrics, `http_requests_total{code="500",method="GET",route="`+path+`"} 1`) {
		t.Fatalf("not counted as a 500 of %s:\n%s", path, metrics)
	}
}

// accessLogged waits (at most 10s) until n access log lines carry field,
// which the front middleware writes after the answer has gone, and returns
// them.
func accessLogged(t *testing.T, logs *observer.ObservedLogs, field zap.Field, n int) []observer.LoggedEntry {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		lines := logs.FilterMessage("request").FilterField(field).All()
		if len(lines) >= n {
			if len(lines) > n {
				t.Fatalf("%d access log lines with %s, want %d", len(lines), field.Key, n)
			}
			return lines
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d access log lines with %s after 10s, want %d", len(lines), field.Key, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A readiness check that panicked ran in a goroutine without a recover, so
// one buggy check killed the process at the first /readyz. It is now a
// failed check, logged at error level with its name and the panic value.
func TestReadyz_PanickingCheck_FailsAndIsLogged(t *testing.T) {
	t.Parallel()
	a, srv, logs := app(t, fx.Provide(httpfx.AsReadinessCheck(func() httpfx.ReadinessCheck {
		return httpfx.ReadinessCheck{Name: "buggy", Check: func(context.Context) error {
			panic(errors.New("assignment to entry in nil map"))
		}}
	})))
	defer a.RequireStop()
	for range 2 { // the process survives the first and answers the next
		code, _, body := get(t, srv.URL()+"/readyz")
		var p httpfx.Problem
		if err := json.Unmarshal([]byte(body), &p); err != nil || code != http.StatusServiceUnavailable ||
			p.Code != httpfx.CodeNotReady || fmt.Sprint(p.Extensions["failed"]) != "[buggy]" {
			t.Fatalf("readyz: %d %s (%v)", code, body, err)
		}
	}
	entries := logs.FilterMessage("readiness check panicked").All()
	if len(entries) != 2 {
		t.Fatalf("%d log entries for 2 panics", len(entries))
	}
	e := entries[0]
	m := e.ContextMap()
	if e.Level != zapcore.ErrorLevel || m["check"] != "buggy" ||
		!strings.Contains(fmt.Sprint(m["panic"]), "nil map") || !strings.Contains(fmt.Sprint(m["stack"]), "goroutine") {
		t.Fatalf("log entry %v %v", e.Level, m)
	}
}

// The SERVER span of a sampled request carries the HTTP semantic
// conventions' request and response attributes, read from the request as
// net/http gives it (the headers by their canonical names).
func TestSpans_ServerAttributes(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	a, srv, _ := app(t, fx.Provide(func() trace.TracerProvider { return tp }))
	req, _ := http.NewRequest(http.MethodGet, srv.URL()+"/items/7", nil)
	req.Header.Set("User-Agent", "payments-client/2.1")
	req.Header.Set("X-Forwarded-For", " 203.0.113.7 , 10.0.0.1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	a.RequireStop()
	spans := exp.GetSpans()
	if len(spans) != 1 {
		t.Fatalf("%d spans", len(spans))
	}
	got := map[string]string{}
	for _, kv := range spans[0].Attributes {
		got[string(kv.Key)] = kv.Value.String()
	}
	host, port, _ := net.SplitHostPort(strings.TrimPrefix(srv.URL(), "http://"))
	want := map[string]string{
		"http.request.method": "GET", "url.scheme": "http", "url.path": "/items/7",
		"server.address": host, "server.port": port, "network.peer.address": "127.0.0.1",
		"client.address": "203.0.113.7", "user_agent.original": "payments-client/2.1",
		"network.protocol.version": "1.1", "http.route": "/items/{id}",
		"http.response.status_code": "200", "http.response.body.size": strconv.Itoa(len(body)),
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	if p, err := strconv.Atoi(got["network.peer.port"]); err != nil || p <= 0 {
		t.Errorf("network.peer.port = %q", got["network.peer.port"])
	}
	if len(got) != len(want)+1 {
		t.Errorf("attributes %v", got)
	}
}
