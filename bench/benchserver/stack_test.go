package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/redis/go-redis/v9"
	"go.uber.org/fx"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/redisfx/redisfx/bench/internal/protocol"
	"github.com/redisfx/redisfx/internal/redistest"
)

// The README stack in process: the same wiring as `benchserver -mode
// stack` (and as bench/run measures over the network), each request
// served by the router without a socket. Time per request moves with the
// machine; allocations and bytes per request do not, so they are what a
// change to the hot path is judged by first (docs/performance.md).

const stackBody = `{"amount":1250,"currency":"EUR","card":"4242424242424242"}`

// stackRouter starts the stack on a private Redis, with the production
// logger (JSON, sampled as zap.NewProduction samples) writing nowhere.
func stackRouter(b testing.TB, tracing bool, env ...string) http.Handler {
	return stackRouterOf(b, stackConfig{breaker: true, tracing: tracing}, env...)
}

// stackRouterOf is stackRouter with c's settings (its Redis, address and
// prefix are the test's).
func stackRouterOf(b testing.TB, c stackConfig, env ...string) http.Handler {
	b.Helper()
	for _, k := range []string{"OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
		"OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG", "OTEL_SDK_DISABLED", "TRACING_EXPORTER"} {
		b.Setenv(k, "")
	}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		b.Setenv(k, v)
	}
	srv := redistest.Start(b)
	// zap.NewProduction's sampling (the first 100 lines of a message, then
	// every 100th), counted over the whole run rather than per second: per
	// second, how many access-log lines are written would follow the
	// machine's speed, and so would the instruction counts.
	log := zap.New(zapcore.NewSamplerWithOptions(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()),
		zapcore.AddSync(io.Discard), zap.InfoLevel), 100*365*24*time.Hour, 100, 100))
	var mux *chi.Mux
	c.redisURL, c.addr, c.prefix = srv.URL(), "127.0.0.1:0", redistest.Prefix(b)
	app := fx.New(append(stackOptions(c), fx.Supply(log), fx.Populate(&mux))...)
	if err := app.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = app.Stop(context.Background()) })
	return mux
}

func stackRequest(key string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/payments", strings.NewReader(stackBody))
	r.Header.Set("Content-Type", "application/json")
	if key != "" {
		r.Header.Set("Idempotency-Key", key)
	}
	return r
}

// serveStack serves requests with keys from key through h. Besides time
// and allocations it reports cpu-ns/op: the process's CPU time (user and
// system, getrusage) per request, which a loaded machine moves far less
// than wall time; Redis runs in its own process and is not in it.
func serveStack(b *testing.B, h http.Handler, key func(i int) string) {
	b.Helper()
	b.ReportAllocs()
	began := cpuTime(b)
	n := 0
	for i := 0; b.Loop(); i++ {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, stackRequest(key(i)))
		if w.Code != http.StatusCreated {
			b.Fatalf("status %d: %s", w.Code, w.Body)
		}
		n++
	}
	b.ReportMetric(float64(cpuTime(b)-began)/float64(n), "cpu-ns/op")
}

func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// limitRouter is the limit server in process: only the protocol's round
// trips, on a plain go-redis client (see protocol.Limit).
func limitRouter(b *testing.B) http.Handler {
	b.Helper()
	srv := redistest.Start(b)
	opts, err := redis.ParseURL(srv.URL())
	if err != nil {
		b.Fatal(err)
	}
	opts.DisableIdentity = true
	rdb := redis.NewClient(opts)
	b.Cleanup(func() { _ = rdb.Close() })
	r := chi.NewRouter()
	r.With(protocol.Limit(rdb, redistest.Prefix(b), nil)).Post("/payments", protocol.Payment)
	return r
}

func BenchmarkStack_LimitNewKey(b *testing.B) {
	serveStack(b, limitRouter(b), func(i int) string { return "new-" + strconv.Itoa(i) })
}

func BenchmarkStack_LimitReplay(b *testing.B) {
	serveStack(b, limitRouter(b), func(int) string { return "replayed" })
}

// BenchmarkStack_Plain is the payment handler on a bare chi router: the
// request and recorder the benchmark itself allocates, to subtract.
func BenchmarkStack_Plain(b *testing.B) {
	r := chi.NewRouter()
	r.Post("/payments", protocol.Payment)
	serveStack(b, r, func(int) string { return "" })
}

func BenchmarkStack_NoKey(b *testing.B) {
	serveStack(b, stackRouter(b, true), func(int) string { return "" })
}

func BenchmarkStack_NewKey(b *testing.B) {
	serveStack(b, stackRouter(b, true), func(i int) string { return "new-" + strconv.Itoa(i) })
}

// BenchmarkStack_NewKeyEmit is BenchmarkStack_NewKey with streamfx and a
// handler that emits one event (the outbox): issue 38 allows it 10 % more
// CPU per request.
func BenchmarkStack_NewKeyEmit(b *testing.B) {
	serveStack(b, stackRouterOf(b, stackConfig{breaker: true, tracing: true, emit: true}), func(i int) string { return "new-" + strconv.Itoa(i) })
}

func BenchmarkStack_Replay(b *testing.B) {
	serveStack(b, stackRouter(b, true), func(int) string { return "replayed" })
}

// otlpReceiver accepts OTLP/HTTP exports and discards them, as bench/run's
// receiver does; its address is returned as an OTEL_EXPORTER_OTLP_ENDPOINT
// setting, with the sampler settings of one ratio.
func otlpReceiver(b *testing.B, ratio string) []string {
	b.Helper()
	rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	b.Cleanup(rc.Close)
	return []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + rc.URL, "OTEL_TRACES_SAMPLER=parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG=" + ratio}
}

// The stack exporting OTLP/HTTP at 10 % sampling, in process: the
// exporter's goroutine runs in this process, so cpu-ns/op includes it.
func BenchmarkStack_NoKeyOTLP10(b *testing.B) {
	serveStack(b, stackRouter(b, true, otlpReceiver(b, "0.1")...), func(int) string { return "" })
}

func BenchmarkStack_NewKeyOTLP10(b *testing.B) {
	serveStack(b, stackRouter(b, true, otlpReceiver(b, "0.1")...), func(i int) string { return "new-" + strconv.Itoa(i) })
}

func BenchmarkStack_ReplayOTLP10(b *testing.B) {
	serveStack(b, stackRouter(b, true, otlpReceiver(b, "0.1")...), func(int) string { return "replayed" })
}

// Without tracingfx: the baseline of the tracing rows.
func BenchmarkStack_NoKeyNoTracing(b *testing.B) {
	serveStack(b, stackRouter(b, false), func(int) string { return "" })
}

func BenchmarkStack_NewKeyNoTracing(b *testing.B) {
	serveStack(b, stackRouter(b, false), func(i int) string { return "new-" + strconv.Itoa(i) })
}

func BenchmarkStack_ReplayNoTracing(b *testing.B) {
	serveStack(b, stackRouter(b, false), func(int) string { return "replayed" })
}

func BenchmarkStack_NoKeyOTLP100(b *testing.B) {
	serveStack(b, stackRouter(b, true, otlpReceiver(b, "1")...), func(int) string { return "" })
}

func BenchmarkStack_ReplayOTLP100(b *testing.B) {
	serveStack(b, stackRouter(b, true, otlpReceiver(b, "1")...), func(int) string { return "replayed" })
}

// The allocations of one request through the README stack (tracing at its
// default), held at what they are: an allocation is a few hundred
// instructions of its own and, in a server whose heap is small, about as
// many again of the garbage collector's, so a change that adds one to
// every request should be seen and weighed here (docs/performance.md).
// The counts include the test's own request and recorder, as the
// benchmarks' allocs/op do, averaged over 1000 requests; each budget is
// the count measured (2026-11-27, the event's 2026-11-29) plus one, because zap's sampler writes
// every access-log line of the first hundred each second, so a slow
// machine logs a larger share of the requests.
func TestStack_AllocationsPerRequest(t *testing.T) {
	h := stackRouter(t, true)
	emitting := stackRouterOf(t, stackConfig{breaker: true, tracing: true, emit: true})
	for _, tc := range []struct {
		path   string
		key    func(i int) string
		budget float64 // without -race, with it
		race   float64
		h      http.Handler // the stack's, or with one emitted event
	}{
		{"no key", func(int) string { return "" }, 30 + 1, 32 + 1, nil},
		{"new key", func(i int) string { return "alloc-new-" + strconv.Itoa(i) }, 79 + 1, 85 + 1, nil},
		{"replay", func(int) string { return "alloc-replayed" }, 55 + 1, 62 + 1, nil},
		{"new key, one event", func(i int) string { return "alloc-emit-" + strconv.Itoa(i) }, 94 + 1, 100 + 1, emitting},
	} {
		if tc.h == nil {
			tc.h = h
		}
		if raceDetector {
			tc.budget = tc.race
		}
		i := 0
		serve := func() {
			w := httptest.NewRecorder()
			tc.h.ServeHTTP(w, stackRequest(tc.key(i)))
			i++
			if w.Code != http.StatusCreated {
				t.Fatalf("%s: status %d: %s", tc.path, w.Code, w.Body)
			}
		}
		serve() // the replay's record, the pool's connection
		got := testing.AllocsPerRun(1000, serve)
		t.Logf("%s: %.0f allocations per request", tc.path, got)
		if got > tc.budget {
			t.Errorf("%s: %.0f allocations per request, budget %.0f", tc.path, got, tc.budget)
		}
	}
}
