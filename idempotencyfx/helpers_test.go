package idempotencyfx

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	zapobs "go.uber.org/zap/zaptest/observer"

	"github.com/redisfx/redisfx/httpfx"
	"github.com/redisfx/redisfx/internal/redistest"
	"github.com/redisfx/redisfx/storefx"
)

// counter is a go-redis hook that counts commands (a script run is one).
type counter struct{ n atomic.Int64 }

func (c *counter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}
func (c *counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// env is one idempotent route on a real Redis.
type env struct {
	t       *testing.T
	srv     *redistest.Server
	rdb     redis.UniversalClient
	svc     *Service
	http    *httptest.Server
	calls   atomic.Int64 // handler executions
	cmds    *counter
	logs    *zapobs.ObservedLogs
	handler http.Handler // the route's handler; replaceable before the first request
	mu      sync.Mutex
}

// unfaultedTimeout bounds Redis calls in an env whose server no fault
// reaches; envs given a server (to pause or kill it) keep 1s.
const unfaultedTimeout = 5 * time.Second

func newEnv(t *testing.T, cfg Config, srv *redistest.Server) *env {
	t.Helper()
	return newEnvAt(t, cfg, srv, "")
}

// newEnvAt is newEnv with the app connected to url instead of srv (a fault
// proxy in front of it, an ACL user), and with options for New.
func newEnvAt(t *testing.T, cfg Config, srv *redistest.Server, url string, opts ...Option) *env {
	t.Helper()
	storeCfg := storefx.Config{ConnectTimeout: time.Second, ReadTimeout: time.Second, DialTimeout: 200 * time.Millisecond}
	switch {
	case url != "":
		storeCfg.URL = url
	case srv == nil && os.Getenv("REDISFX_TEST_CLUSTER") != "":
		// make test-cluster: the same suite against 3 masters with replicas.
		storeCfg.Addrs = redistest.StartCluster(t, 3, 1).Addrs()
	case srv == nil:
		// A server no test can fault: a slow call here is the loaded CI
		// machine (race detector, parallel packages), not the subject of
		// the test, so it gets room (CI once saw a first claim time out).
		srv = redistest.Start(t)
		storeCfg.URL = srv.URL()
		storeCfg.ReadTimeout = unfaultedTimeout
		if cfg.StoreTimeout == 0 {
			cfg.StoreTimeout = unfaultedTimeout
		}
	default:
		storeCfg.URL = srv.URL()
	}
	if cfg.KeyPrefix == "" {
		cfg.KeyPrefix = redistest.Prefix(t)
	}
	if cfg.DefaultTTL == 0 {
		cfg.DefaultTTL = time.Hour
	}
	e := &env{t: t, srv: srv, cmds: &counter{}}
	client, err := storefx.New("default", storeCfg)
	if err != nil {
		t.Fatal(err)
	}
	client.AddHook(e.cmds)
	e.rdb = client
	core, logs := zapobs.New(zap.DebugLevel)
	e.logs = logs
	e.svc, err = New(client, cfg, append([]Option{WithLogger(zap.New(core))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	_ = e.svc.Start(context.Background())
	e.handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		n := e.calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Add("X-Multi", "a")
		w.Header().Add("X-Multi", "b")
		w.Header().Set("Set-Cookie", "session=secret")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"n":`+itoa(n)+`,"echo":`+quote(string(body))+`}`)
	})
	r := chi.NewRouter()
	r.Use(e.svc.Install)
	r.Use(func(next http.Handler) http.Handler { // recover like httpfx does
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			defer func() {
				if p := recover(); p != nil {
					httpfx.NewProblem(500, "internal_error", "panic").Write(w)
				}
			}()
			next.ServeHTTP(w, r)
		})
	})
	current := func(w http.ResponseWriter, r *http.Request) { // the handler setHandler set last
		e.mu.Lock()
		h := e.handler
		e.mu.Unlock()
		h.ServeHTTP(w, r)
	}
	r.With(Idempotent()).Post("/payments", current)
	for _, v := range []string{"/v1", "/v2"} { // one route under two prefixes that http.StripPrefix removes
		sub := chi.NewRouter()
		sub.With(Idempotent()).Post("/payments", current)
		r.Mount(v, http.StripPrefix(v, sub))
	}
	r.With(IdempotentRequired()).Post("/required", e.handler.ServeHTTP)
	r.With(Idempotent(), Idempotent()).Post("/twice", e.handler.ServeHTTP)
	e.http = httptest.NewServer(r)
	t.Cleanup(func() {
		e.http.Close()
		_ = e.svc.Close()
		_ = client.Close()
		if t.Failed() { // say why: a store error's cause is only in the log
			for _, entry := range logs.All() {
				t.Logf("log: %s %s %v", entry.Level, entry.Message, entry.ContextMap())
			}
		}
	})
	return e
}

func (e *env) setHandler(h http.HandlerFunc) {
	e.mu.Lock()
	e.handler = h
	e.mu.Unlock()
}

type reply struct {
	status int
	header http.Header
	body   string
}

func (e *env) post(path, key, body string, hdr ...string) reply {
	e.t.Helper()
	return e.postCtx(context.Background(), path, key, body, hdr...)
}

func (e *env) postCtx(ctx context.Context, path, key, body string, hdr ...string) reply {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.http.URL+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return reply{status: -1, body: err.Error()}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

func (e *env) record(key string) *Record {
	e.t.Helper()
	rec, err := e.svc.Get(context.Background(), "", key)
	if err != nil {
		e.t.Fatal(err)
	}
	return rec
}

func itoa(n int64) string { return strconvI(n) }

func quote(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s) + `"`
}

func wantStatus(t *testing.T, r reply, status int, code string) {
	t.Helper()
	if r.status != status {
		t.Fatalf("status = %d, want %d; body %s", r.status, status, r.body)
	}
	if code != "" && !strings.Contains(r.body, `"code":"`+code+`"`) {
		t.Fatalf("body = %s, want code %s", r.body, code)
	}
	if code != "" && r.header.Get("Content-Type") != httpfx.ProblemContentType {
		t.Fatalf("Content-Type = %q, want problem+json", r.header.Get("Content-Type"))
	}
}

// gate holds a handler until the test opens it; it opens by itself when the
// test ends, so a failing test never leaves a handler (and the server) stuck.
type gate struct {
	entered chan struct{}
	release chan struct{}
	once    sync.Once
	enter   sync.Once
}

func newGate(t *testing.T) *gate {
	g := &gate{entered: make(chan struct{}), release: make(chan struct{})}
	t.Cleanup(g.open)
	return g
}

func (g *gate) open() { g.once.Do(func() { close(g.release) }) }

// waitEntered waits until a handler holds the gate, for at most 10s (a
// request that never reaches its handler fails the test instead of hanging
// the package until its timeout).
func (g *gate) waitEntered(t *testing.T) {
	t.Helper()
	select {
	case <-g.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("no handler entered the gate in 10s")
	}
}

// hold marks the handler as entered and blocks until the gate opens.
func (g *gate) hold() {
	g.enter.Do(func() { close(g.entered) })
	<-g.release
}

// topicCount is the number of channels with a topic (for tests).
func (n *notifier) topicCount() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.topics)
}

// confirmedCount is the number of channels whose subscription Redis has
// confirmed on the current connection (for tests).
func (n *notifier) confirmedCount() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	k := 0
	for _, t := range n.topics {
		if t.acked {
			k++
		}
	}
	return k
}

// pendingSignals is the number of channels with a waiter's signal not yet
// fired (for tests: 0 once a message reached every waiting channel).
func (n *notifier) pendingSignals() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	k := 0
	for _, t := range n.topics {
		if t.cur != nil {
			k++
		}
	}
	return k
}
