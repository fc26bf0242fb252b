package idempotencyfx_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"

	"github.com/redisfx/redisfx/httpfx"
	"github.com/redisfx/redisfx/idempotencyfx"
	"github.com/redisfx/redisfx/internal/redistest"
	"github.com/redisfx/redisfx/storefx"
)

// Regression tests of what an adversary reproduced against the public API
// (query names escaped differently, DoInScope with a quoted key, a route
// bound twice around a wrapper without Unwrap).

type advEnv struct {
	srv   *redistest.Server
	svc   *idempotencyfx.Service
	url   string
	calls atomic.Int64
}

// advNew builds a Service on a private Redis and a chi router with h on
// POST /p (Idempotent) behind outer (optional).
func advNew(t *testing.T, cfg idempotencyfx.Config, h http.HandlerFunc, outer func(http.Handler) http.Handler) *advEnv {
	t.Helper()
	e := &advEnv{srv: redistest.StartPrivate(t)}
	client, err := storefx.New("default", storefx.Config{URL: e.srv.URL(), ConnectTimeout: time.Second, ReadTimeout: time.Second, DialTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.KeyPrefix == "" {
		cfg.KeyPrefix = redistest.Prefix(t)
	}
	e.svc, err = idempotencyfx.New(client, cfg)
	if err != nil {
		t.Fatal(err)
	}
	_ = e.svc.Start(context.Background())
	r := chi.NewRouter()
	r.Use(e.svc.Install)
	if outer != nil {
		r.Use(outer)
	}
	r.With(idempotencyfx.Idempotent()).Post("/p", func(w http.ResponseWriter, r *http.Request) {
		e.calls.Add(1)
		h(w, r)
	})
	srv := httptest.NewServer(r)
	e.url = srv.URL
	t.Cleanup(func() { srv.Close(); _ = e.svc.Close(); _ = client.Close() })
	return e
}

// privateService is a Service with cfg on a storefx client of url (a
// private Redis), both closed when the test ends.
func privateService(t *testing.T, url string, cfg idempotencyfx.Config) *idempotencyfx.Service {
	t.Helper()
	client, err := storefx.New("default", storefx.Config{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := idempotencyfx.New(client, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Close(); _ = client.Close() })
	return svc
}

type advReply struct {
	status int
	header http.Header
	body   string
}

func (e *advEnv) do(t *testing.T, path, key, ctype, body string) advReply {
	req, _ := http.NewRequest(http.MethodPost, e.url+path, strings.NewReader(body))
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	if key != "" {
		req.Header["Idempotency-Key"] = []string{key}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return advReply{status: -1, body: err.Error()}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return advReply{resp.StatusCode, resp.Header, string(b)}
}

// The fingerprint sorts query parameters by their *raw* name, but the
// handler sees decoded names: "a" and "%61" are one parameter to it, and the
// order of its values changes when the two are swapped. Two requests that
// the handler reads differently share a fingerprint: the second is replayed
// the first's answer instead of 422.
func TestFingerprint_QueryNamesEscapedDifferently_Get422(t *testing.T) {
	e := advNew(t, idempotencyfx.Config{}, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(201)
		_, _ = io.WriteString(w, "charged amount="+r.URL.Query().Get("amount"))
	}, nil)
	first := e.do(t, "/p?amount=1&%61mount=100", "k1", "", "")
	second := e.do(t, "/p?%61mount=100&amount=1", "k1", "", "")
	t.Logf("first:  %d %q", first.status, first.body)
	t.Logf("second: %d %q replayed=%q", second.status, second.body, second.header.Get("Idempotent-Replayed"))
	if second.status != 422 {
		t.Errorf("second request (handler would read amount=100) got %d %q, replayed=%s; want 422",
			second.status, second.body, second.header.Get("Idempotent-Replayed"))
	}
}

// The middleware unquotes an sf-string key ("a b" is the key a b); Do
// validates its key with ParseKey but then uses the raw, quoted string: a
// job that passes on the header's value reaches another record and runs
// again; and the key a b itself is refused by Do.
func TestDoInScope_QuotedKey_UsesTheMiddlewaresRecord(t *testing.T) {
	e := advNew(t, idempotencyfx.Config{}, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "http charged")
	}, nil)
	const header = `"order 42"`
	first := e.do(t, "/p", header, "application/json", `{}`)
	if first.status != 200 {
		t.Fatalf("%d %s", first.status, first.body)
	}
	req, _ := http.NewRequest(http.MethodPost, "/p", strings.NewReader(`{}`))
	req.Header.Set("Content-Type", "application/json")
	fp, _ := idempotencyfx.DefaultFingerprint(req, []byte(`{}`))
	ran := 0
	out, replayed, err := e.svc.DoInScope(context.Background(), "", header, fp, func(context.Context) ([]byte, error) {
		ran++
		return []byte("job charged"), nil
	})
	if err != nil || ran != 0 || !replayed || string(out) != "http charged" {
		t.Errorf("DoInScope(%q) = %q, replayed %v, %v (work ran %d times); want the middleware's record replayed", header, out, replayed, err, ran)
	}
	for _, k := range []string{header, "order 42"} {
		if rec, err := e.svc.Get(context.Background(), "", k); err != nil || rec == nil {
			t.Errorf("Get(%q) = %v, %v; want the middleware's record", k, rec, err)
		}
	}
	if ok, err := e.svc.Delete(context.Background(), "", "order 42"); err != nil || !ok {
		t.Errorf("Delete(unquoted) = %v, %v; want the record deleted", ok, err)
	}
}

// plainWriter wraps a ResponseWriter without Unwrap.
type plainWriter struct{ http.ResponseWriter } // a wrapper without Unwrap

// Bound twice with an ordinary response-writer wrapper between: the inner
// binding does not see the outer's recorder, claims the same record, and
// waits on its own request.
// A route bound twice with a wrapper without Unwrap in between engages
// once: before, the inner binding waited on the outer one's record and
// the outer recorded its 409 for DefaultTTL.
func TestIdempotent_BoundTwiceAroundAPlainWrapper_EngagesOnce(t *testing.T) {
	svc := privateService(t, redistest.StartPrivate(t).URL(), idempotencyfx.Config{KeyPrefix: redistest.Prefix(t), WaitTimeout: 500 * time.Millisecond})
	wrap := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { next.ServeHTTP(plainWriter{w}, r) })
	}
	r := chi.NewRouter()
	r.Use(svc.Install)
	var calls atomic.Int64
	r.With(idempotencyfx.Idempotent(), wrap, idempotencyfx.Idempotent()).Post("/p", func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		_, _ = io.WriteString(w, "ok")
	})
	hs := httptest.NewServer(r)
	defer hs.Close()
	req, _ := http.NewRequest(http.MethodPost, hs.URL+"/p", strings.NewReader("x"))
	req.Header.Set("Idempotency-Key", "twice")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || calls.Load() != 1 {
		t.Fatalf("first request with the route bound twice: %d %s (calls %d)", resp.StatusCode, b, calls.Load())
	}
}

// Bound twice with a middleware between that clones the request (r.Clone,
// net/http's way to change a request in a middleware: a header map of its
// own) and wraps the writer without Unwrap: the inner binding sees work
// that holds its very record and engages no more. Before, it waited on the
// outer binding, the handler never ran, and the outer binding recorded the
// 409 in_progress as the key's answer for DefaultTTL. (Found by an
// adversary.)
func TestIdempotent_BoundTwiceAroundACloningMiddleware_EngagesOnce(t *testing.T) {
	svc := privateService(t, redistest.StartPrivate(t).URL(), idempotencyfx.Config{KeyPrefix: redistest.Prefix(t), WaitTimeout: 500 * time.Millisecond})
	cloning := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			r2 := r.Clone(r.Context())
			r2.Header.Set("X-Internal", "1")
			next.ServeHTTP(plainWriter{w}, r2)
		})
	}
	r := chi.NewRouter()
	r.Use(svc.Install)
	var calls atomic.Int64
	r.With(idempotencyfx.Idempotent(), cloning, idempotencyfx.Idempotent()).Post("/p", func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, "charged")
	})
	hs := httptest.NewServer(r)
	defer hs.Close()
	post := func() (int, string, string) {
		req, _ := http.NewRequest(http.MethodPost, hs.URL+"/p", strings.NewReader("x"))
		req.Header.Set("Idempotency-Key", "twice")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp.Header.Get(idempotencyfx.ReplayedHeader)
	}
	if code, body, _ := post(); code != http.StatusCreated || body != "charged" || calls.Load() != 1 {
		t.Fatalf("first request: %d %q, handler ran %d times; want 201 once", code, body, calls.Load())
	}
	if code, body, replayed := post(); code != http.StatusCreated || body != "charged" || replayed != "true" || calls.Load() != 1 {
		t.Fatalf("retry: %d %q replayed %q, handler ran %d times; want the 201 replayed", code, body, replayed, calls.Load())
	}
}

// A request served inside another request's idempotent work is a request
// of its own: a batch endpoint that dispatches sub-requests through the
// router (their contexts derive from the batch's), or a Do function that
// serves a route in process. Each sub-request's key is protected: key pay-A
// runs once across two batches and a direct request. (Found by an
// adversary: the check for a binding already engaged took any fencing
// token in the context for "this request", and pay-A ran 3 times.)
func TestIdempotent_SubRequestsOfIdempotentWork_EachProtected(t *testing.T) {
	svc := privateService(t, redistest.StartPrivate(t).URL(), idempotencyfx.Config{KeyPrefix: redistest.Prefix(t)})
	r := chi.NewRouter()
	r.Use(svc.Install)
	var charges atomic.Int64
	r.With(idempotencyfx.Idempotent()).Post("/payments", func(w http.ResponseWriter, r *http.Request) {
		charges.Add(1)
		w.WriteHeader(201)
		_, _ = io.WriteString(w, "charged")
	})
	dispatch := func(ctx context.Context, key string) *httptest.ResponseRecorder {
		sub, _ := http.NewRequestWithContext(ctx, http.MethodPost, "/payments", strings.NewReader("x"))
		sub.Header.Set("Idempotency-Key", key)
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, sub)
		return rec
	}
	r.With(idempotencyfx.Idempotent()).Post("/batch", func(w http.ResponseWriter, req *http.Request) {
		rec := dispatch(req.Context(), "pay-A")
		_, _ = io.WriteString(w, rec.Result().Status+" "+rec.Header().Get(idempotencyfx.ReplayedHeader))
	})
	hs := httptest.NewServer(r)
	defer hs.Close()
	post := func(path, key string) string {
		req, _ := http.NewRequest(http.MethodPost, hs.URL+path, strings.NewReader("x"))
		req.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	if got := post("/batch", "batch-1"); got != "201 Created " {
		t.Fatalf("batch 1: %q, want the sub-request's own 201", got)
	}
	if got := post("/batch", "batch-2"); got != "201 Created true" {
		t.Fatalf("batch 2: %q, want the sub-request replayed", got)
	}
	if got := post("/payments", "pay-A"); got != "charged" {
		t.Fatalf("direct: %q", got)
	}
	// Inside Do's function too.
	_, _, err := svc.Do(context.Background(), "job-1", "fp", func(ctx context.Context) ([]byte, error) {
		if rec := dispatch(ctx, "pay-A"); rec.Header().Get(idempotencyfx.ReplayedHeader) != "true" {
			t.Errorf("a sub-request inside Do was not protected: %d %v", rec.Code, rec.Header())
		}
		return nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := charges.Load(); n != 1 {
		t.Fatalf("key pay-A ran %d times, want once", n)
	}
}

// A handler whose Hijack fails (HTTP/2 cannot hijack; gorilla/websocket then
// answers an error) answers normally, and that answer is the client's and
// the record's: 418 reaches the client and is replayed; 500 reaches the
// client and records a failure. (Found by an adversary: the recorder
// marked the response as hijacked even when the hijack failed, and the
// client got 200.)
func TestIdempotent_FailedHijack_AnswerKeptAndRecorded(t *testing.T) {
	svc := privateService(t, redistest.StartPrivate(t).URL(), idempotencyfx.Config{KeyPrefix: redistest.Prefix(t)})
	upgrade := func(status int) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if _, _, err := http.NewResponseController(w).Hijack(); err != nil {
				http.Error(w, "upgrade failed", status)
			}
		}
	}
	r := chi.NewRouter()
	r.Use(svc.Install)
	r.With(idempotencyfx.Idempotent()).Post("/ws418", upgrade(http.StatusTeapot))
	r.With(idempotencyfx.Idempotent()).Post("/ws500", upgrade(http.StatusInternalServerError))
	hs := httptest.NewUnstartedServer(r)
	hs.EnableHTTP2 = true
	hs.StartTLS()
	defer hs.Close()
	post := func(path string) (int, string, string) {
		req, _ := http.NewRequest(http.MethodPost, hs.URL+path, strings.NewReader("x"))
		req.Header.Set("Idempotency-Key", "hijack"+path)
		resp, err := hs.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.ProtoMajor != 2 {
			t.Fatalf("served over %s, want HTTP/2 (where Hijack fails)", resp.Proto)
		}
		return resp.StatusCode, resp.Header.Get(idempotencyfx.ReplayedHeader), strings.TrimSpace(string(b))
	}
	if code, replayed, body := post("/ws418"); code != 418 || replayed != "" || body != "upgrade failed" {
		t.Fatalf("first: %d %q %q, want the handler's 418", code, replayed, body)
	}
	if code, replayed, _ := post("/ws418"); code != 418 || replayed != "true" {
		t.Fatalf("retry: %d replayed=%q, want the 418 replayed", code, replayed)
	}
	if code, _, _ := post("/ws500"); code != 500 {
		t.Fatalf("first 500 case: %d, want the handler's 500", code)
	}
	if code, _, body := post("/ws500"); code != 409 || !strings.Contains(body, "idempotency_previous_failed") {
		t.Fatalf("retry of the failed one: %d %s, want 409 previous_failed", code, body)
	}
}

// A handler that panics behind Idempotent(): the recovery middleware's 500
// keeps the headers outer middleware set (a request id, CORS), and none of
// those the handler set before it panicked. (Found by an adversary: the
// request id was dropped.)
func TestIdempotent_Panic_OuterHeadersKept(t *testing.T) {
	svc := privateService(t, redistest.StartPrivate(t).URL(), idempotencyfx.Config{KeyPrefix: redistest.Prefix(t)})
	r := chi.NewRouter()
	r.Use(func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Request-Id", "req-7")
			w.Header().Set("Access-Control-Allow-Origin", "*")
			next.ServeHTTP(w, r)
		})
	})
	r.Use(middleware.Recoverer)
	r.Use(svc.Install)
	r.With(idempotencyfx.Idempotent()).Post("/p", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Partial", "half")
		w.Header().Set("X-Request-Id", "changed by the handler")
		panic("boom")
	})
	hs := httptest.NewServer(r)
	defer hs.Close()
	req, _ := http.NewRequest(http.MethodPost, hs.URL+"/p", strings.NewReader("x"))
	req.Header.Set("Idempotency-Key", "panics")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 500 || resp.Header.Get("X-Request-Id") != "req-7" ||
		resp.Header.Get("Access-Control-Allow-Origin") != "*" || resp.Header.Get("X-Partial") != "" {
		t.Fatalf("%d %v: want 500 with the outer headers as they were and none of the handler's", resp.StatusCode, resp.Header)
	}
}

// Trailers a handler declares (Trailer: X-Sum, set after the body) are sent
// as trailers, not headers, on the first answer and on its replay.
func TestIdempotent_Trailers_SentAsTrailersAndReplayed(t *testing.T) {
	svc := privateService(t, redistest.StartPrivate(t).URL(), idempotencyfx.Config{KeyPrefix: redistest.Prefix(t)})
	r := chi.NewRouter()
	r.Use(svc.Install)
	r.With(idempotencyfx.Idempotent()).Post("/p", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-Sum")
		w.WriteHeader(201)
		_, _ = io.WriteString(w, "body")
		w.Header().Set("X-Sum", "42")
	})
	hs := httptest.NewServer(r)
	defer hs.Close()
	for _, attempt := range []string{"first", "replay"} {
		req, _ := http.NewRequest(http.MethodPost, hs.URL+"/p", strings.NewReader("x"))
		req.Header.Set("Idempotency-Key", "trailers")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body) // trailers arrive after the body
		resp.Body.Close()
		if resp.StatusCode != 201 || string(b) != "body" || resp.Header.Get("X-Sum") != "" || resp.Trailer.Get("X-Sum") != "42" {
			t.Fatalf("%s: %d %q header %v trailer %v; want X-Sum only as a trailer", attempt, resp.StatusCode, b, resp.Header, resp.Trailer)
		}
		if replayed := resp.Header.Get(idempotencyfx.ReplayedHeader) == "true"; replayed != (attempt == "replay") {
			t.Fatalf("%s: replayed=%v", attempt, replayed)
		}
	}
}

// A handler whose answer began passing through to the client (larger than
// MaxResponseBytes, or flushed) and that then fails (returns an error, or
// panics): the client already has part of a 201 and may act on it, so the
// key's record is not replayable and the handler never runs again. Before,
// the outcome was recorded as failed and, once LockTimeout passed, a retry
// charged again. (Found by an adversary.)
func TestAnswerPassedThroughThenFailure_NeverRunsAgain(t *testing.T) {
	charged := `{"charged":true,"receipt":"` + strings.Repeat("r", 64) + `"}`
	for _, tc := range []struct {
		name    string
		handler http.HandlerFunc
	}{
		{"larger than MaxResponseBytes, then an error", httpfx.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) error {
			w.WriteHeader(http.StatusCreated)
			_, _ = io.WriteString(w, charged)
			return errors.New("audit log write failed")
		}).ServeHTTP},
		{"flushed, then an error", httpfx.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) error {
			w.WriteHeader(http.StatusCreated)
			_, _ = io.WriteString(w, `{"charged":true}`)
			_ = http.NewResponseController(w).Flush()
			return errors.New("audit log write failed")
		}).ServeHTTP},
		{"larger than MaxResponseBytes, then a panic", func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusCreated)
			_, _ = io.WriteString(w, charged)
			panic(http.ErrAbortHandler) // net/http's own: aborts quietly
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := advNew(t, idempotencyfx.Config{MaxResponseBytes: 16, LockTimeout: time.Second}, tc.handler, nil)
			first := e.do(t, "/p", "big", "", "")
			if first.status != http.StatusCreated && first.status != -1 { // -1: the panic aborted the connection
				t.Fatalf("first: %d %q", first.status, first.body)
			}
			rec, err := e.svc.Get(context.Background(), "", "big")
			if err != nil || rec == nil || rec.State != idempotencyfx.StateNotReplayable {
				t.Fatalf("record after an answer that reached the client, then a failure: %+v, %v; want not replayable", rec, err)
			}
			retry := e.do(t, "/p", "big", "", "")
			if retry.status != http.StatusConflict || !strings.Contains(retry.body, idempotencyfx.CodeResponseNotStored) || e.calls.Load() != 1 {
				t.Fatalf("retry: %d %q, handler ran %d times; want 409 %s and one run", retry.status, retry.body, e.calls.Load(), idempotencyfx.CodeResponseNotStored)
			}
		})
	}
}

// The mark that makes a request with the key of the work it runs in pass
// through ends with that work: a goroutine of the handler that outlives it
// and sends a request with the same key through the router, with the
// handler's context, gets the recorded answer, not a second run.
func TestIdempotent_SameKeyAfterTheWorkEnded_Replayed(t *testing.T) {
	svc := privateService(t, redistest.StartPrivate(t).URL(), idempotencyfx.Config{KeyPrefix: redistest.Prefix(t)})
	r := chi.NewRouter()
	r.Use(svc.Install)
	var charges atomic.Int64
	later := make(chan context.Context, 1)
	r.With(idempotencyfx.Idempotent()).Post("/payments", func(w http.ResponseWriter, req *http.Request) {
		if charges.Add(1) == 1 {
			later <- context.WithoutCancel(req.Context())
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, "charged")
	})
	send := func(ctx context.Context) *httptest.ResponseRecorder {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "/payments", strings.NewReader("x"))
		req.Header.Set("Idempotency-Key", "pay-1")
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, req)
		return rec
	}
	if first := send(context.Background()); first.Code != http.StatusCreated {
		t.Fatalf("first: %d %s", first.Code, first.Body)
	}
	again := send(<-later) // the first request has been answered: its work ended
	if again.Code != http.StatusCreated || again.Header().Get(idempotencyfx.ReplayedHeader) != "true" || charges.Load() != 1 {
		t.Fatalf("same key with the ended work's context: %d replayed %q, charged %d times; want the replay",
			again.Code, again.Header().Get(idempotencyfx.ReplayedHeader), charges.Load())
	}
}

// Two Services with the same KeyPrefix on two databases (two stores): a
// route of A forwards its key in a sub-request to a route of B. The key is
// not the record A's work holds as far as B is concerned: B claims it in
// its own store, and a direct retry to B is replayed. (Found by an
// adversary: the pass-through compared only record names, and B never
// recorded the sub-request, so the retry ran B's handler again.)
func TestIdempotent_SameKeyForwardedToAnotherService_ProtectedThere(t *testing.T) {
	srv := redistest.StartPrivate(t)
	cfg := idempotencyfx.Config{KeyPrefix: redistest.Prefix(t)}
	svcA, svcB := privateService(t, srv.URL()+"/0", cfg), privateService(t, srv.URL()+"/1", cfg)
	r := chi.NewRouter()
	var chargesB atomic.Int64
	r.Group(func(g chi.Router) {
		g.Use(svcB.Install)
		g.With(idempotencyfx.Idempotent()).Post("/b/charge", func(w http.ResponseWriter, _ *http.Request) {
			chargesB.Add(1)
			w.WriteHeader(http.StatusCreated)
			_, _ = io.WriteString(w, "B charged")
		})
	})
	r.Group(func(g chi.Router) {
		g.Use(svcA.Install)
		g.With(idempotencyfx.Idempotent()).Post("/a/order", func(w http.ResponseWriter, req *http.Request) {
			sub, _ := http.NewRequestWithContext(req.Context(), http.MethodPost, "/b/charge", strings.NewReader("x"))
			sub.Header.Set("Idempotency-Key", req.Header.Get("Idempotency-Key"))
			rec := httptest.NewRecorder()
			r.ServeHTTP(rec, sub)
			w.WriteHeader(http.StatusCreated)
			_, _ = io.WriteString(w, "order placed; B said "+rec.Body.String())
		})
	})
	hs := httptest.NewServer(r)
	defer hs.Close()
	post := func(path string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, hs.URL+path, strings.NewReader("x"))
		req.Header.Set("Idempotency-Key", "k-1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		return resp.StatusCode, resp.Header.Get(idempotencyfx.ReplayedHeader)
	}
	if code, _ := post("/a/order"); code != http.StatusCreated {
		t.Fatalf("order: %d", code)
	}
	if rec, err := svcB.Get(context.Background(), "", "k-1"); err != nil || rec == nil || rec.State != idempotencyfx.StateCompleted {
		t.Fatalf("B's record of the forwarded key: %+v, %v; want completed", rec, err)
	}
	if code, replayed := post("/b/charge"); code != http.StatusCreated || replayed != "true" || chargesB.Load() != 1 {
		t.Fatalf("direct retry to B: %d replayed %q, B charged %d times; want the replay, once", code, replayed, chargesB.Load())
	}
}

// Found by an adversary: the same request (r.WithContext: the same header
// map) forwarded from A's idempotent work to a router of Service B was
// taken for A's own and passed through, so B never recorded the key and a
// direct retry to B ran again. Only this Service's work, holding this very
// record, serves a request by its lease.
func TestIdempotent_SameRequestForwardedToAnotherService_ProtectedThere(t *testing.T) {
	srv := redistest.StartPrivate(t)
	cfg := idempotencyfx.Config{KeyPrefix: redistest.Prefix(t)}
	svcA, svcB := privateService(t, srv.URL()+"/0", cfg), privateService(t, srv.URL()+"/1", cfg)
	var chargesB atomic.Int64
	rb := chi.NewRouter()
	rb.Use(svcB.Install)
	rb.With(idempotencyfx.Idempotent()).Post("/pay", func(w http.ResponseWriter, _ *http.Request) {
		chargesB.Add(1)
		_, _ = io.WriteString(w, "ledger written")
	})
	ra := chi.NewRouter()
	ra.Use(svcA.Install)
	ra.With(idempotencyfx.Idempotent()).Post("/pay", func(w http.ResponseWriter, req *http.Request) {
		rec := httptest.NewRecorder()
		rb.ServeHTTP(rec, req.WithContext(req.Context()))
		_, _ = io.WriteString(w, "paid; ledger said "+rec.Body.String())
	})
	a, b := httptest.NewServer(ra), httptest.NewServer(rb)
	defer a.Close()
	defer b.Close()
	post := func(url string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, url+"/pay", strings.NewReader("x"))
		req.Header.Set("Idempotency-Key", "k-1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		return resp.StatusCode, resp.Header.Get(idempotencyfx.ReplayedHeader)
	}
	if code, _ := post(a.URL); code != http.StatusOK {
		t.Fatalf("A: %d", code)
	}
	if rec, err := svcB.Get(context.Background(), "", "k-1"); err != nil || rec == nil || rec.State != idempotencyfx.StateCompleted {
		t.Fatalf("B's record of the forwarded request's key: %+v, %v; want completed", rec, err)
	}
	if code, replayed := post(b.URL); code != http.StatusOK || replayed != "true" || chargesB.Load() != 1 {
		t.Fatalf("direct retry to B: %d replayed %q, B ran %d times; want the replay, once", code, replayed, chargesB.Load())
	}
}

// Found by an adversary: a sub-request with a key of its own, served
// through the router with the outer work's own ResponseWriter, was passed
// through unclaimed (the writer wrapped the outer recorder), so a direct
// request with the sub-request's key ran its handler again.
func TestIdempotent_SubRequestOnTheOuterWriter_ProtectedByItsOwnKey(t *testing.T) {
	srv := redistest.StartPrivate(t)
	svc := privateService(t, srv.URL(), idempotencyfx.Config{KeyPrefix: redistest.Prefix(t)})
	var inner atomic.Int64
	r := chi.NewRouter()
	r.Use(svc.Install)
	r.With(idempotencyfx.Idempotent()).Post("/v2/charge", func(w http.ResponseWriter, _ *http.Request) {
		n := inner.Add(1)
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, "v2 charged #"+strconv.FormatInt(n, 10))
	})
	r.With(idempotencyfx.Idempotent()).Post("/v1/charge", func(w http.ResponseWriter, req *http.Request) {
		sub, _ := http.NewRequestWithContext(req.Context(), http.MethodPost, "/v2/charge", strings.NewReader("x"))
		sub.Header.Set("Idempotency-Key", "sub-"+req.Header.Get("Idempotency-Key"))
		r.ServeHTTP(w, sub) // the outer work's own writer
	})
	hs := httptest.NewServer(r)
	defer hs.Close()
	post := func(path, key string) (int, string, string) {
		req, _ := http.NewRequest(http.MethodPost, hs.URL+path, strings.NewReader("x"))
		req.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get(idempotencyfx.ReplayedHeader), string(body)
	}
	if code, _, body := post("/v1/charge", "K"); code != http.StatusCreated || body != "v2 charged #1" {
		t.Fatalf("v1: %d %q", code, body)
	}
	code, replayed, body := post("/v2/charge", "sub-K")
	if code != http.StatusCreated || replayed != "true" || body != "v2 charged #1" || inner.Load() != 1 {
		t.Fatalf("direct sub-K: %d replayed %q %q, v2 ran %d times; want the replay of #1, once", code, replayed, body, inner.Load())
	}
	if code, replayed, _ := post("/v1/charge", "K"); code != http.StatusCreated || replayed != "true" || inner.Load() != 1 {
		t.Fatalf("retry of K: %d replayed %q, v2 ran %d times", code, replayed, inner.Load())
	}
}

// Found by an adversary: a Do within a Do with the same key waited
// WaitTimeout for itself and failed the outer work (409 in progress),
// where a request in the same position is served by the work's lease.
func TestDo_WithinDoSameKey_RunsAsPartOfTheWork(t *testing.T) {
	srv := redistest.StartPrivate(t)
	svc := privateService(t, srv.URL(), idempotencyfx.Config{KeyPrefix: redistest.Prefix(t), WaitTimeout: 2 * time.Second})
	var inner atomic.Int64
	began := time.Now()
	out, replayed, err := svc.Do(context.Background(), "job-1", "fp", func(ctx context.Context) ([]byte, error) {
		o, _, err := svc.Do(ctx, "job-1", "fp", func(context.Context) ([]byte, error) {
			inner.Add(1)
			return []byte("inner"), nil
		})
		return append([]byte("outer+"), o...), err
	})
	if err != nil || replayed || string(out) != "outer+inner" || inner.Load() != 1 {
		t.Fatalf("Do: %q %v %v, inner ran %d times; want outer+inner, once", out, replayed, err, inner.Load())
	}
	if took := time.Since(began); took > time.Second {
		t.Fatalf("the nested Do took %v: it waited for itself", took)
	}
	again, replayed, err := svc.Do(context.Background(), "job-1", "fp", func(context.Context) ([]byte, error) { return []byte("again"), nil })
	if err != nil || !replayed || string(again) != "outer+inner" {
		t.Fatalf("retry: %q %v %v; want the outer result replayed", again, replayed, err)
	}
}

// Found by an adversary attacking the pass-through: only the innermost
// work was looked at, so A's key sent from B's work inside A's waited
// WaitTimeout for A and failed. Every work the call runs in counts.
func TestDo_KeyOfAnOuterWorkTwoLevelsUp_RunsAsPartOfIt(t *testing.T) {
	srv := redistest.StartPrivate(t)
	svc := privateService(t, srv.URL(), idempotencyfx.Config{KeyPrefix: redistest.Prefix(t), WaitTimeout: 2 * time.Second})
	began := time.Now()
	var innerA atomic.Int64
	out, _, err := svc.Do(context.Background(), "A", "fp", func(ctx context.Context) ([]byte, error) {
		return nil2(svc.Do(ctx, "B", "fp", func(ctx context.Context) ([]byte, error) {
			return nil2(svc.Do(ctx, "A", "fp", func(context.Context) ([]byte, error) {
				innerA.Add(1)
				return []byte("a-inner"), nil
			}))
		}))
	})
	if err != nil || string(out) != "a-inner" || innerA.Load() != 1 {
		t.Fatalf("A->B->A: %q %v, inner A ran %d times", out, err, innerA.Load())
	}
	if took := time.Since(began); took > time.Second {
		t.Fatalf("A->B->A took %v: it waited for itself", took)
	}
}

// nil2 drops Do's replayed result.
func nil2(out []byte, _ bool, err error) ([]byte, error) { return out, err }
