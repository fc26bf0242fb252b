package httpfx_test

import (
	"bufio"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"go.uber.org/fx"

	"github.com/redisfx/redisfx/httpfx"
)

// The front middleware wraps the response writer to measure it. These
// tests pin what the wrap must not change for a handler (streaming with
// Flush, hijacking, 1xx informational answers) and what it must measure
// (a handler that writes nothing answered 200; bytes; the final status,
// not an informational one).
func TestResponseWriter_WrapKeepsWhatHandlersUse(t *testing.T) {
	t.Parallel()
	flushed := make(chan struct{})
	a, srv, logs := app(t, fx.Provide(httpfx.AsRoutes(func() httpfx.Routes {
		return func(r chi.Router) {
			r.Get("/silent", func(http.ResponseWriter, *http.Request) {})
			r.Get("/stream", func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.WriteString(w, "first;")
				if err := http.NewResponseController(w).Flush(); err != nil {
					t.Errorf("flush: %v", err)
				}
				select { // the client must see "first;" before the handler goes on
				case <-flushed:
				case <-time.After(10 * time.Second):
					t.Error("the flushed chunk never reached the client")
				}
				_, _ = io.WriteString(w, "second")
			})
			r.Get("/hints", func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Link", "</style.css>; rel=preload")
				w.WriteHeader(http.StatusEarlyHints)
				w.WriteHeader(http.StatusCreated)
				_, _ = io.WriteString(w, "made")
			})
			r.Get("/hijack", func(w http.ResponseWriter, r *http.Request) {
				conn, rw, err := http.NewResponseController(w).Hijack()
				if err != nil {
					t.Errorf("hijack: %v", err)
					return
				}
				defer conn.Close()
				_, _ = rw.WriteString("HTTP/1.1 299 Hijacked\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
				_ = rw.Flush()
			})
		}
	})))
	defer a.RequireStop()

	if code, _, body := get(t, srv.URL()+"/silent"); code != 200 || body != "" {
		t.Fatalf("silent: %d %q", code, body)
	}

	resp, err := http.Get(srv.URL() + "/stream")
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	first, err := br.ReadString(';')
	if err != nil || first != "first;" {
		t.Fatalf("first chunk %q, %v", first, err)
	}
	close(flushed)
	rest, _ := io.ReadAll(br)
	resp.Body.Close()
	if string(rest) != "second" {
		t.Fatalf("rest %q", rest)
	}

	if code, _, body := get(t, srv.URL()+"/hints"); code != 201 || body != "made" {
		t.Fatalf("hints: %d %q", code, body)
	}
	if code, _, body := get(t, srv.URL()+"/hijack"); code != 299 || body != "ok" {
		t.Fatalf("hijack: %d %q", code, body)
	}

	_, _, metrics := get(t, srv.URL()+"/metrics")
	for _, want := range []string{
		`http_requests_total{code="200",method="GET",route="/silent"} 1`,
		`http_requests_total{code="200",method="GET",route="/stream"} 1`,
		`http_requests_total{code="201",method="GET",route="/hints"} 1`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	status := map[string]any{}
	bytes := map[string]any{}
	for _, e := range logs.FilterMessage("request").All() {
		m := e.ContextMap()
		route, _ := m["route"].(string)
		status[route], bytes[route] = m["status"], m["bytes"]
	}
	if status["/silent"] != int64(200) || status["/hints"] != int64(201) || bytes["/stream"] != int64(len("first;second")) {
		t.Fatalf("access log status %v bytes %v", status, bytes)
	}
}
