package httpfx_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/fx"

	"github.com/redisfx/redisfx/httpfx"
)

// A path that no route of a sub-router matches was labelled with the
// sub-router's mount point ("/api/*"): metric, access log and span name
// looked like a route. It is unmatched, as at the top level; the 405 of a
// sub-router too.
func TestUnmatched_InsideASubRouter_LabelledUnmatched(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	a, srv, logs := app(t, fx.Provide(func() trace.TracerProvider { return tp }),
		fx.Provide(httpfx.AsRoutes(func() httpfx.Routes {
			return func(r chi.Router) {
				r.Route("/api", func(r chi.Router) {
					r.Get("/orders", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "[]") })
				})
			}
		})))
	if code, _, _ := get(t, srv.URL()+"/api/wp-login.php"); code != http.StatusNotFound {
		t.Fatalf("status %d", code)
	}
	resp, err := http.Post(srv.URL()+"/api/orders", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("POST status %d", resp.StatusCode)
	}
	get(t, srv.URL()+"/api/orders")
	_, _, metrics := get(t, srv.URL()+"/metrics")
	a.RequireStop()
	if strings.Contains(metrics, `route="/api/*"`) {
		t.Errorf("a sub-router's mount point is a route label:\n%s", metrics)
	}
	for _, want := range []string{`code="404",method="GET",route="unmatched"} 1`, `code="405",method="POST",route="unmatched"} 1`, `code="200",method="GET",route="/api/orders"} 1`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("missing %s:\n%s", want, metrics)
		}
	}
	var names []string
	for _, s := range exp.GetSpans() {
		names = append(names, s.Name)
	}
	if strings.Join(names, ",") != "GET,POST,GET /api/orders" {
		t.Errorf("span names %v", names)
	}
	for _, e := range logs.FilterMessage("request").All() {
		if r := e.ContextMap()["route"]; r == "/api/*" {
			t.Errorf("access log route %v", r)
		}
	}
}

// A readiness check that ignores its context held /readyz for as long as
// it ran (200 after 2.5 s, with a 1 s bound documented). The bound now
// holds: the check has failed at the deadline.
func TestReadyz_CheckIgnoringItsContext_FailsAtTheDeadline(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	a, srv, _ := app(t, fx.Provide(httpfx.AsReadinessCheck(func() httpfx.ReadinessCheck {
		return httpfx.ReadinessCheck{Name: "slow", Check: func(context.Context) error {
			select { // ignores its context
			case <-release:
			case <-time.After(3 * time.Second):
			}
			return nil
		}}
	})))
	defer a.RequireStop()
	defer close(release)
	began := time.Now()
	code, _, body := get(t, srv.URL()+"/readyz")
	took := time.Since(began)
	if code != http.StatusServiceUnavailable || !strings.Contains(body, `"slow"`) {
		t.Fatalf("%d %s", code, body)
	}
	if took > 1900*time.Millisecond {
		t.Fatalf("/readyz answered after %v; the bound is 1 s", took)
	}
}
