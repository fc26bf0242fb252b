package httpfx_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/redisfx/redisfx/httpfx"
	"github.com/redisfx/redisfx/metricsfx"
)

// A readiness check that ignores its context and never returns: every
// /readyz still answers 503 within its bound, and the check runs once, not
// once per request (each run held a goroutine for as long as the check
// hangs). Once it returns, the next /readyz runs it afresh.
func TestReadyz_CheckIgnoringItsContext_OneRunInFlight(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var runs atomic.Int32
	a, srv, _ := app(t, fx.Provide(httpfx.AsReadinessCheck(func() httpfx.ReadinessCheck {
		return httpfx.ReadinessCheck{Name: "stuck", Check: func(context.Context) error {
			runs.Add(1)
			<-release
			return nil
		}}
	})))
	defer a.RequireStop()
	readyz := func() {
		began := time.Now()
		code, _, body := get(t, srv.URL()+httpfx.ReadyPath)
		if code != http.StatusServiceUnavailable || !strings.Contains(body, `"stuck"`) {
			t.Errorf("readyz with a hung check: %d %s", code, body)
		}
		if took := time.Since(began); took > 5*time.Second {
			t.Errorf("readyz took %v", took)
		}
	}
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() { defer wg.Done(); readyz() }()
	}
	wg.Wait()
	readyz()
	readyz()
	if n := runs.Load(); n != 1 {
		t.Errorf("the hung check ran %d times for 22 requests, want 1", n)
	}
	close(release)
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, _, _ := get(t, srv.URL()+httpfx.ReadyPath)
		if code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("readyz still %d after the check returned", code)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := runs.Load(); n < 2 {
		t.Errorf("the check ran %d times, want a fresh run after the hung one", n)
	}
}

// A readiness check that leaves by runtime.Goexit has failed, and the next
// /readyz runs it again rather than waiting on a run that never ends.
func TestReadyz_CheckLeavingByGoexit_FailsAndRunsAgain(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	a, srv, _ := app(t, fx.Provide(httpfx.AsReadinessCheck(func() httpfx.ReadinessCheck {
		return httpfx.ReadinessCheck{Name: "gone", Check: func(context.Context) error {
			runs.Add(1)
			runtime.Goexit()
			return nil
		}}
	})))
	defer a.RequireStop()
	for i := range 2 {
		if code, _, body := get(t, srv.URL()+httpfx.ReadyPath); code != http.StatusServiceUnavailable || !strings.Contains(body, `"gone"`) {
			t.Fatalf("readyz %d: %d %s", i, code, body)
		}
	}
	if n := runs.Load(); n != 2 {
		t.Errorf("the check ran %d times for 2 requests, want 2", n)
	}
}

// Every way a handler can leave: the client gets a complete answer (or, for
// a success cut short, none it could take for complete), and the access log
// and the metrics say what it got. goleak (TestMain) checks that nothing is
// left running.
func TestHandlerExits_EachAnsweredAndRecorded(t *testing.T) {
	t.Parallel()
	entered := make(chan struct{})
	a, srv, logs := app(t, fx.Provide(httpfx.AsRoutes(func() httpfx.Routes {
		return func(r chi.Router) {
			r.Post("/return", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusCreated) })
			r.Method("POST", "/error", httpfx.HandlerFunc(func(http.ResponseWriter, *http.Request) error { return errTeapot }))
			r.Post("/panic", func(http.ResponseWriter, *http.Request) { panic("boom") })
			r.Post("/goexit", func(http.ResponseWriter, *http.Request) { runtime.Goexit() })
			r.Post("/goexit-after-writing", func(w http.ResponseWriter, _ *http.Request) {
				_, _ = io.WriteString(w, `{"payment":"p-1",`)
				runtime.Goexit()
			})
			r.Method("POST", "/never", httpfx.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) error {
				close(entered)
				<-r.Context().Done()
				return r.Context().Err()
			}))
		}
	})))
	defer a.RequireStop()
	closed := map[string]bool{} // the answer said Connection: close
	post := func(ctx context.Context, path string) (int, string, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL()+path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		closed[path] = resp.Close
		body, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body), err
	}
	problem500 := func(path string) {
		code, body, err := post(context.Background(), path)
		var p httpfx.Problem
		if err != nil || code != 500 || json.Unmarshal([]byte(body), &p) != nil || p.Code != "internal_error" {
			t.Errorf("%s: %d %q %v, want a complete 500 problem", path, code, body, err)
		}
	}
	if code, _, err := post(context.Background(), "/return"); err != nil || code != http.StatusCreated {
		t.Errorf("/return: %d %v", code, err)
	}
	problem500("/error")
	problem500("/panic")
	problem500("/goexit")
	if !closed["/goexit"] {
		// The connection ends with the handler's goroutine: a client that
		// kept it would send its next request into a closed connection.
		t.Error("/goexit: the answer does not say Connection: close")
	}
	if code, body, err := post(context.Background(), "/goexit-after-writing"); err == nil {
		t.Errorf("/goexit-after-writing: the client read a complete %d answer %q", code, body)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-entered; cancel() }() // the client leaves once the handler runs
	if _, _, err := post(ctx, "/never"); !errors.Is(err, context.Canceled) {
		t.Errorf("/never: %v", err)
	}
	for path, want := range map[string]int64{"/return": 201, "/error": 500, "/panic": 500, "/goexit": 500, "/goexit-after-writing": 500, "/never": 499} {
		m := accessLogged(t, logs, zap.String("path", path), 1)[0].ContextMap()
		if m["status"] != want {
			t.Errorf("%s logged %v, want %d", path, m, want)
		}
	}
	if m := accessLogged(t, logs, zap.String("path", "/goexit-after-writing"), 1)[0].ContextMap(); m["aborted"] != true {
		t.Errorf("/goexit-after-writing logged %v, want aborted", m)
	}
	_, _, metrics := get(t, srv.URL()+httpfx.MetricsPath)
	for _, want := range []string{`code="201",method="POST",route="/return"} 1`, `code="500",method="POST",route="/goexit"} 1`,
		`code="500",method="POST",route="/goexit-after-writing"} 1`, `code="499",method="POST",route="/never"} 1`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// Without metricsfx.Module there is no registry: /metrics is not served,
// and the start-up log says what to add.
func TestMetrics_WithoutMetricsfx_404AndLogged(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zap.InfoLevel)
	var srv *httpfx.Server
	a := fxtest.New(t, fx.NopLogger, fx.Supply(zap.New(core), &httpfx.Config{Addr: "127.0.0.1:0"}), httpfx.Module, fx.Populate(&srv))
	a.RequireStart()
	defer a.RequireStop()
	if code, _, _ := get(t, srv.URL()+httpfx.MetricsPath); code != http.StatusNotFound {
		t.Errorf("/metrics without a registry: %d", code)
	}
	if logs.FilterMessageSnippet("add metricsfx.Module").Len() != 1 {
		t.Errorf("no start-up line names metricsfx.Module: %v", logs.All())
	}
}

// With metricsfx.Module, /metrics serves the Go runtime and process
// metrics under their standard names, which standard dashboards read, and
// the app's own under its prefix.
func TestMetrics_GoAndProcessUnprefixed(t *testing.T) {
	t.Parallel()
	var srv *httpfx.Server
	a := fxtest.New(t, fx.NopLogger, fx.Provide(zap.NewNop), fx.Supply(&httpfx.Config{Addr: "127.0.0.1:0"}, metricsfx.Config{Prefix: "payments"}),
		metricsfx.Module, httpfx.Module, fx.Populate(&srv))
	a.RequireStart()
	defer a.RequireStop()
	get(t, srv.URL()+httpfx.HealthPath)
	_, _, body := get(t, srv.URL()+httpfx.MetricsPath)
	for _, want := range []string{"\ngo_goroutines ", "\nprocess_cpu_seconds_total ", "\npayments_http_requests_total{"} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", strings.TrimSpace(want))
		}
	}
	if strings.Contains(body, "payments_go_") || strings.Contains(body, "payments_process_") {
		t.Error("/metrics serves the Go or process metrics under the app's prefix")
	}
}

// A check that passes only after its 1 s: a request that joins its run late
// (the probe right after one that timed out) must not take that late pass.
func TestReadyz_LatePassOfASharedRun_Fails(t *testing.T) {
	t.Parallel()
	a, srv, _ := app(t, fx.Provide(httpfx.AsReadinessCheck(func() httpfx.ReadinessCheck {
		return httpfx.ReadinessCheck{Name: "late", Check: func(ctx context.Context) error {
			<-ctx.Done()
			time.Sleep(300 * time.Millisecond) // past the deadline, while the next probe waits
			return nil
		}}
	})))
	defer a.RequireStop()
	for i := range 2 {
		if code, _, body := get(t, srv.URL()+httpfx.ReadyPath); code != http.StatusServiceUnavailable || !strings.Contains(body, `"late"`) {
			t.Errorf("readyz %d: %d %s", i, code, body)
		}
	}
}

// A client that half-closes its connection (shutdown(SHUT_WR) after its
// request) still reads the answer, though net/http cancels the request's
// context on that EOF: a handler that then returns without writing is logged
// and counted as the 200 the client reads, not 499.
func TestHalfClosedClient_LoggedAsTheAnswerItRead(t *testing.T) {
	t.Parallel()
	a, srv, logs := app(t, fx.Provide(httpfx.AsRoutes(func() httpfx.Routes {
		return func(r chi.Router) {
			r.Post("/ack", func(_ http.ResponseWriter, r *http.Request) {
				select {
				case <-r.Context().Done(): // the half-close
				case <-time.After(10 * time.Second):
				}
			})
		}
	})))
	defer a.RequireStop()
	conn, err := net.Dial("tcp", strings.TrimPrefix(srv.URL(), "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, _ = io.WriteString(conn, "POST /ack HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
	if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the client read %d", resp.StatusCode)
	}
	if m := accessLogged(t, logs, zap.String("path", "/ack"), 1)[0].ContextMap(); m["status"] != int64(http.StatusOK) {
		t.Errorf("the client read 200, the access log says %v", m["status"])
	}
	if _, _, metrics := get(t, srv.URL()+httpfx.MetricsPath); !strings.Contains(metrics, `code="200",method="POST",route="/ack"} 1`) {
		t.Errorf("the metrics do not count the 200 the client read:\n%s", metrics)
	}
}

// A panic or Goexit after the handler set content headers: the 500 problem
// goes out without them (a Content-Encoding: gzip left on it made the
// client fail to decode the problem).
func TestHandlerExits_ProblemDropsTheHandlersContentHeaders(t *testing.T) {
	t.Parallel()
	setHeaders := func(w http.ResponseWriter) {
		h := w.Header()
		h.Set("Content-Encoding", "gzip")
		h.Set("Content-Disposition", `attachment; filename="report.csv"`)
		h.Set("Content-Length", "12345")
		h.Set("ETag", `"v1"`)
		h.Set("Vary", "Origin") // not a content header: it stays
	}
	a, srv, _ := app(t, fx.Provide(httpfx.AsRoutes(func() httpfx.Routes {
		return func(r chi.Router) {
			r.Get("/headers-panic", func(w http.ResponseWriter, _ *http.Request) { setHeaders(w); panic("boom") })
			r.Get("/headers-goexit", func(w http.ResponseWriter, _ *http.Request) { setHeaders(w); runtime.Goexit() })
		}
	})))
	defer a.RequireStop()
	c := &http.Client{Transport: &http.Transport{DisableCompression: true}} // headers as sent
	defer c.CloseIdleConnections()
	for _, path := range []string{"/headers-panic", "/headers-goexit"} {
		resp, err := c.Get(srv.URL() + path)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		var p httpfx.Problem
		if err != nil || resp.StatusCode != 500 || json.Unmarshal(body, &p) != nil || p.Code != "internal_error" {
			t.Errorf("%s: %d %q %v, want a 500 problem", path, resp.StatusCode, body, err)
		}
		for _, h := range []string{"Content-Encoding", "Content-Disposition", "ETag"} {
			if v := resp.Header.Get(h); v != "" {
				t.Errorf("%s: the problem keeps the handler's %s: %s", path, h, v)
			}
		}
		if resp.Header.Get("Vary") != "Origin" {
			t.Errorf("%s: the handler's Vary is gone: %v", path, resp.Header)
		}
	}
}

// A handler that leaves by Goexit without reading a large request body: the
// client still reads the complete 500 (closing the connection with the body
// unread in the socket made the kernel reset it, and the answer was lost).
func TestHandlerExits_GoexitWithUnreadBody_CompleteAnswer(t *testing.T) {
	t.Parallel()
	a, srv, _ := app(t, fx.Provide(httpfx.AsRoutes(func() httpfx.Routes {
		return func(r chi.Router) {
			r.Post("/goexit", func(http.ResponseWriter, *http.Request) { runtime.Goexit() })
		}
	})))
	defer a.RequireStop()
	for i := range 9 {
		size := 1 << (20 + i%3) // 1, 2 and 4 MiB
		resp, err := http.Post(srv.URL()+"/goexit", "application/octet-stream", bytes.NewReader(make([]byte, size)))
		if err != nil {
			t.Errorf("%d bytes: no answer: %v", size, err)
			continue
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		var p httpfx.Problem
		if err != nil || resp.StatusCode != 500 || json.Unmarshal(body, &p) != nil || p.Code != "internal_error" {
			t.Errorf("%d bytes: %d %q %v, want a complete 500 problem", size, resp.StatusCode, body, err)
		}
	}
}

// Over HTTP/2 (the router served by a TLS server of the app's own) Goexit's
// 500 problem arrives too; net/http then resets the stream, as after any
// handler that does not return (docs/http.md).
func TestHandlerExits_GoexitOverHTTP2_500Arrives(t *testing.T) {
	t.Parallel()
	var mux *chi.Mux
	a, _, _ := app(t, fx.Provide(httpfx.AsRoutes(func() httpfx.Routes {
		return func(r chi.Router) {
			r.Get("/goexit", func(http.ResponseWriter, *http.Request) { runtime.Goexit() })
		}
	})), fx.Populate(&mux))
	defer a.RequireStop()
	ts := httptest.NewUnstartedServer(mux)
	ts.EnableHTTP2 = true
	ts.StartTLS()
	defer ts.Close()
	resp, err := ts.Client().Get(ts.URL + "/goexit")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.ProtoMajor != 2 || resp.StatusCode != 500 || resp.Header.Get("Content-Type") != httpfx.ProblemContentType {
		t.Errorf("%s %d %v, want an HTTP/2 500 problem", resp.Proto, resp.StatusCode, resp.Header)
	}
}
