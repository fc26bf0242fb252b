package ratelimitfx

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	zapobserver "go.uber.org/zap/zaptest/observer"

	"github.com/redisfx/redisfx/internal/obstest"
	"github.com/redisfx/redisfx/internal/redistest"
	"github.com/redisfx/redisfx/plugintrace"
	"github.com/redisfx/redisfx/storefx"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(redistest.ForExamples(m), goleak.IgnoreTopFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}

func newLimiter(t testing.TB, srv *redistest.Server, cfg Config, opts ...Option) *Limiter {
	t.Helper()
	c, err := storefx.New("default", storefx.Config{URL: srv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if cfg.KeyPrefix == "" {
		cfg.KeyPrefix = redistest.Prefix(t)
	}
	if cfg.StoreTimeout == 0 {
		// The tests that count decisions must not see the store time out on
		// a loaded machine (fail-open would allow one more); those about
		// timeouts set their own.
		cfg.StoreTimeout = 30 * time.Second
	}
	l, err := New(c, cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// A limit of 37 lets exactly 37 of 100 concurrent requests through, though
// they are spread over two limiters (two processes) on one Redis.
func TestExactlyLimitAcrossTwoInstances(t *testing.T) {
	t.Parallel()
	for _, alg := range []Algorithm{FixedWindow, SlidingLog} {
		t.Run(string(alg), func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			cfg := Config{KeyPrefix: redistest.Prefix(t), Algorithm: alg, Limit: 37, Window: time.Minute, StoreTimeout: 10 * time.Second} // exactness, not latency: a loaded machine took over 500ms
			limiters := []*Limiter{newLimiter(t, srv, cfg), newLimiter(t, srv, cfg)}
			var allowed, refused atomic.Int64
			start := make(chan struct{})
			var wg sync.WaitGroup
			for i := range 100 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					d, err := limiters[i%2].Check(context.Background(), Rule{Name: "api"}, "client-1")
					if err != nil {
						t.Error(err)
						return
					}
					if d.Allowed {
						allowed.Add(1)
					} else {
						refused.Add(1)
					}
				}()
			}
			close(start)
			wg.Wait()
			if allowed.Load() != 37 || refused.Load() != 63 {
				t.Fatalf("allowed %d refused %d, want exactly 37 and 63", allowed.Load(), refused.Load())
			}
			keys := srv.Client().Keys(context.Background(), cfg.KeyPrefix+"*").Val()
			if len(keys) != 1 {
				t.Fatalf("counters %q: want exactly one for one rule and one client", keys)
			}
			if pttl := srv.Client().PTTL(context.Background(), keys[0]).Val(); pttl <= 0 || pttl > time.Minute {
				t.Fatalf("counter PTTL %v: a counter must always expire within its window", pttl)
			}
		})
	}
}

// Rules count separately per route unless they share a Name.
func TestMiddleware_PerRouteCounters(t *testing.T) {
	t.Parallel()
	l := newLimiter(t, redistest.Start(t), Config{})
	rule := l.Limit(Rule{Limit: 1, Window: time.Minute})
	r := chi.NewRouter()
	ok := func(w http.ResponseWriter, _ *http.Request) {}
	r.With(rule).Get("/a", ok)
	r.With(rule).Get("/b", ok)
	for _, tc := range []struct {
		path string
		want int
	}{{"/a", 200}, {"/b", 200}, {"/a", 429}, {"/b", 429}} {
		w := httptest.NewRecorder()
		r.ServeHTTP(w, httptest.NewRequest(http.MethodGet, tc.path, nil))
		if w.Code != tc.want {
			t.Fatalf("%s: %d, want %d", tc.path, w.Code, tc.want)
		}
	}
}

func TestKeys_TrustedProxiesAndUsers(t *testing.T) {
	l, err := New(unconnected(t), Config{TrustedProxies: []string{"10.0.0.0/8", "192.0.2.1"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		remote, xff, want string
	}{
		{"203.0.113.9:1", "", "ip:203.0.113.9"},
		{"203.0.113.9:1", "1.1.1.1", "ip:203.0.113.9"},                        // untrusted peer: its header is not believed
		{"10.1.2.3:1", "198.51.100.4", "ip:198.51.100.4"},                     // one trusted proxy
		{"10.1.2.3:1", "6.6.6.6, 198.51.100.4, 192.0.2.1", "ip:198.51.100.4"}, // spoofed left part ignored
		{"10.1.2.3:1", "10.9.9.9", "ip:10.9.9.9"},                             // only proxies: the leftmost
		{"10.1.2.3:1", "not-an-ip", "ip:10.1.2.3"},
		{"[::ffff:203.0.113.9]:1", "", "ip:203.0.113.9"},
	} {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.RemoteAddr = tc.remote
		if tc.xff != "" {
			req.Header.Set("X-Forwarded-For", tc.xff)
		}
		if got, _ := l.ByIP()(req); got != tc.want {
			t.Errorf("remote %s xff %q: %s, want %s", tc.remote, tc.xff, got, tc.want)
		}
	}
	anon := httptest.NewRequest(http.MethodGet, "/", nil)
	if _, ok := ByUser(func(*http.Request) string { return "" })(anon); ok {
		t.Error("an anonymous request was keyed by user")
	}
	if k, ok := ByHeader("X-Api-Key")(anon); ok {
		t.Errorf("missing header keyed as %q", k)
	}
}

// A trusted range written in IPv4-mapped form was accepted but never
// matched (addresses are unmapped before the check): every client behind
// the proxy counted as the proxy. It is the IPv4 range it maps.
func TestKeys_TrustedProxyRangeInMappedFormIsBelieved(t *testing.T) {
	l, err := New(unconnected(t), Config{TrustedProxies: []string{"::ffff:10.0.0.0/104", "::ffff:192.0.2.0/120", "2001:db8::/32"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		remote, xff, want string
	}{
		{"[::ffff:10.0.0.1]:443", "198.51.100.1", "ip:198.51.100.1"},
		{"10.200.0.1:443", "198.51.100.2", "ip:198.51.100.2"},
		{"192.0.2.77:443", "198.51.100.3", "ip:198.51.100.3"},
		{"11.0.0.1:443", "198.51.100.4", "ip:11.0.0.1"}, // outside the range: not believed
		{"[2001:db8::7]:443", "198.51.100.5", "ip:198.51.100.5"},
	} {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.RemoteAddr = tc.remote
		req.Header.Set("X-Forwarded-For", tc.xff)
		if got, _ := l.ByIP()(req); got != tc.want {
			t.Errorf("remote %s xff %q: %s, want %s", tc.remote, tc.xff, got, tc.want)
		}
	}
}

func TestOutage_FailOpenAndFailClosed(t *testing.T) {
	t.Parallel()
	srv := redistest.StartPrivate(t)
	reg := prometheus.NewRegistry()
	core, logs := zapobserver.New(zap.WarnLevel)
	open := newLimiter(t, srv, Config{StoreTimeout: 200 * time.Millisecond}, WithRegisterer(reg), WithLogger(zap.New(core)))
	closed := newLimiter(t, srv, Config{StoreTimeout: 200 * time.Millisecond, ErrorPolicy: FailClosed})
	srv.Kill()
	for _, tc := range []struct {
		l          *Limiter
		want       int
		retryAfter string
	}{{open, 200, ""}, {closed, 503, "1"}} {
		r := chi.NewRouter()
		r.With(tc.l.Handler).Get("/", func(http.ResponseWriter, *http.Request) {})
		w := httptest.NewRecorder()
		r.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
		if w.Code != tc.want || w.Header().Get("Retry-After") != tc.retryAfter || w.Header().Get("RateLimit-Limit") != "" {
			t.Fatalf("%s: %d %v", tc.l.cfg.ErrorPolicy, w.Code, w.Header())
		}
		if tc.want == 503 && !strings.Contains(w.Body.String(), `"code":"rate_limit_unavailable"`) {
			t.Fatalf("503 body %s", w.Body)
		}
	}
	d, err := closed.Check(context.Background(), Rule{}, "k")
	if !errors.Is(err, ErrStoreUnavailable) || d.Allowed {
		t.Fatalf("fail-closed Check = %+v, %v", d, err)
	}
	if obstest.Value(t, reg, "ratelimit_requests_total", "status", "error") != 1 || obstest.Value(t, reg, "ratelimit_allowed_total") != 0 {
		t.Fatal("a store failure must count as status=error only")
	}
	for range 3 {
		_, _ = open.Check(context.Background(), Rule{}, "k")
	}
	if n := logs.Len(); n != 1 {
		t.Fatalf("%d store-failure warnings for 4 failed checks, want 1 (at most one per 10s)", n)
	}
}

// The sliding log frees capacity exactly when the oldest request leaves
// the window.
func TestSlidingLog_FreesCapacityAsRequestsAge(t *testing.T) {
	t.Parallel()
	l := newLimiter(t, redistest.Start(t), Config{Algorithm: SlidingLog, Limit: 3, Window: 400 * time.Millisecond})
	ctx := context.Background()
	var last Decision
	for i := range 4 {
		d, err := l.Check(ctx, Rule{}, "k")
		if err != nil || d.Allowed != (i < 3) || d.Current != int64(i+1) {
			t.Fatalf("request %d: %+v %v", i+1, d, err)
		}
		last = d
	}
	if last.Reset <= 0 || last.Reset > 400*time.Millisecond {
		t.Fatalf("Reset %v", last.Reset)
	}
	time.Sleep(last.Reset + 50*time.Millisecond) // the oldest request leaves the window
	if d, err := l.Check(ctx, Rule{}, "k"); err != nil || !d.Allowed {
		t.Fatalf("after the oldest aged out: %+v %v", d, err)
	}
}

// Config.KeyAttribute decides how the key appears in the span and in a
// store error: here as a keyed digest after the rule's name.
func TestKeyAttribute(t *testing.T) {
	t.Parallel()
	spans := obstest.NewSpans(t)
	hash := plugintrace.HashKey([]byte("secret"))
	l := newLimiter(t, redistest.Start(t), Config{KeyAttribute: hash}, WithTracerProvider(spans.Tracer()))
	rule := Rule{Name: "login", Limit: 5, Window: time.Minute}
	if _, err := l.Check(context.Background(), rule, "203.0.113.9"); err != nil {
		t.Fatal(err)
	}
	if c := spans.Named(t, "rate_limit.check"); len(c) != 1 || c[0].Attributes[AttrKey] != "login:"+hash.Value("203.0.113.9") {
		t.Fatalf("spans %+v", c)
	}

	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 100 * time.Millisecond, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	dead, err := New(rdb, Config{KeyAttribute: hash})
	if err != nil {
		t.Fatal(err)
	}
	_, err = dead.Check(context.Background(), rule, "203.0.113.9")
	if err == nil || strings.Contains(err.Error(), "203.0.113.9") || !strings.Contains(err.Error(), hash.Value("203.0.113.9")) {
		t.Fatalf("store error %v: want the key's digest, not the key", err)
	}
}

func TestSpansAndMetrics(t *testing.T) {
	t.Parallel()
	spans := obstest.NewSpans(t)
	reg := prometheus.NewRegistry()
	l := newLimiter(t, redistest.Start(t), Config{}, WithRegisterer(reg), WithTracerProvider(spans.Tracer()))
	ctx := context.Background()
	rule := Rule{Name: "login", Limit: 1, Window: 30 * time.Second}
	_, _ = l.Check(ctx, rule, "user:7")
	_, _ = l.Check(ctx, rule, "user:7")
	checks := spans.Named(t, "rate_limit.check")
	if len(checks) != 2 {
		t.Fatalf("spans %+v", checks)
	}
	for i, want := range []struct {
		allowed          bool
		current, remains float64
		event, status    string
	}{{true, 1, 0, "request.allowed", "OK"}, {false, 2, 0, "request.blocked", "ERROR"}} {
		s := checks[i]
		a := s.Attributes
		if a["redisfx.plugin"] != "rate-limit" || a["db.operation"] != "INCR" || a["db.system"] != "redis" || a[AttrKey] != "login:"+plugintrace.Redacted ||
			a[AttrLimit] != float64(1) || a[AttrWindow] != float64(30) || a[AttrCurrent] != want.current || a[AttrRemaining] != want.remains ||
			a[AttrAllowed] != want.allowed || obstest.EventNames(s)[0] != want.event || s.Status.Code != want.status || a["redisfx.duration_ms"] == nil {
			t.Errorf("check %d: %+v", i, s)
		}
	}
	if m := checks[1].Status.Message; m != "Rate limit exceeded" {
		t.Errorf("blocked status message %q", m)
	}
	for name, want := range map[string]float64{"ratelimit_allowed_total": 1, "ratelimit_rejected_total": 1} {
		if got := obstest.Value(t, reg, name); got != want {
			t.Errorf("%s = %v", name, got)
		}
	}
	if obstest.Value(t, reg, "ratelimit_requests_total", "status", "rejected") != 1 || obstest.Value(t, reg, "ratelimit_requests_total", "status", "allowed") != 1 {
		t.Error("ratelimit_requests_total{status}")
	}
}

func TestConfigNamesTheOption(t *testing.T) {
	for opt, c := range map[string]Config{
		"Limit": {Limit: -1}, "Window": {Window: -1}, "Algorithm": {Algorithm: "token-bucket"},
		"ErrorPolicy": {ErrorPolicy: "fail-sometimes"}, "TrustedProxies": {TrustedProxies: []string{"10.0.0.0/33"}},
	} {
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "Config."+opt+":") {
			t.Errorf("%s: %v", opt, err)
		}
	}
}

// Mounted before routing, the limiter counts every path together: a client
// cannot get a fresh counter by varying the path.
func TestMiddleware_BeforeRouting_OneCounterForAllPaths(t *testing.T) {
	t.Parallel()
	l := newLimiter(t, redistest.Start(t), Config{Limit: 2, Window: time.Minute})
	r := chi.NewRouter()
	r.Use(l.Handler)
	r.Get("/items/{id}", func(http.ResponseWriter, *http.Request) {})
	for i, want := range []int{200, 200, 429} {
		w := httptest.NewRecorder()
		r.ServeHTTP(w, httptest.NewRequest(http.MethodGet, fmt.Sprint("/items/", i), nil))
		if w.Code != want {
			t.Fatalf("request %d: %d, want %d", i+1, w.Code, want)
		}
	}
	// A path that matches no route is counted too.
	w := httptest.NewRecorder()
	r.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/no/such/path", nil))
	if w.Code != 429 {
		t.Fatalf("unmatched path: %d, want 429", w.Code)
	}
}

// unconnected is a client that is never used: for tests of what New
// computes without Redis.
func unconnected(t *testing.T) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	return c
}
