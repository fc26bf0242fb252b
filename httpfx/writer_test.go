package httpfx_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
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
			r.Head("/head", func(w http.ResponseWriter, _ *http.Request) {
				_, _ = io.WriteString(w, "ten bytes!") // net/http sends none of it
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

	if resp, err := http.Head(srv.URL() + "/head"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("head: %v %v", resp, err)
	} else {
		resp.Body.Close()
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
	if status["/silent"] != int64(200) || status["/hints"] != int64(201) || bytes["/stream"] != int64(len("first;second")) || bytes["/head"] != int64(0) {
		t.Fatalf("access log status %v bytes %v", status, bytes)
	}
}

// A streaming handler learns that its client left from
// http.ResponseController's Flush, as with net/http's own writer: the wrap
// flushes through the server writer's FlushError, which reports the write
// error (a wrap with only Flush swallowed it, and the handler streamed on).
func TestResponseWriter_FlushReportsTheClientGone(t *testing.T) {
	t.Parallel()
	flushErr := make(chan error, 1)
	leave := make(chan struct{})
	a, srv, _ := app(t, fx.Provide(httpfx.AsRoutes(func() httpfx.Routes {
		return func(r chi.Router) {
			r.Get("/events", func(w http.ResponseWriter, r *http.Request) {
				rc := http.NewResponseController(w)
				_, _ = io.WriteString(w, "data: 0\n\n")
				if err := rc.Flush(); err != nil {
					flushErr <- fmt.Errorf("first flush: %w", err)
					return
				}
				<-leave // the client has closed its connection
				deadline := time.Now().Add(10 * time.Second)
				for time.Now().Before(deadline) {
					_, _ = io.WriteString(w, strings.Repeat("x", 1024))
					if err := rc.Flush(); err != nil {
						flushErr <- err
						return
					}
					time.Sleep(5 * time.Millisecond) // bounded: the kernel reports the reset within a few writes
				}
				flushErr <- nil
			})
		}
	})))
	defer a.RequireStop()

	conn, err := net.Dial("tcp", strings.TrimPrefix(srv.URL(), "http://"))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.WriteString(conn, "GET /events HTTP/1.1\r\nHost: x\r\n\r\n")
	if line, err := bufio.NewReader(conn).ReadString('\n'); err != nil || !strings.HasPrefix(line, "HTTP/1.1 200") {
		t.Fatalf("status line %q, %v", line, err)
	}
	_ = conn.(*net.TCPConn).SetLinger(0) // close with a reset
	_ = conn.Close()
	close(leave)
	if err := <-flushErr; err == nil {
		t.Fatal("Flush reported no error in 10 s of writing to a closed connection")
	}
}
