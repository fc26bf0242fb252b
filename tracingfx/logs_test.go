package tracingfx

import (
	"context"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"

	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/redisfx/redisfx/plugintrace"
)

// With WithLogBridge and an OTLP exporter, log records are exported over
// OTLP with the trace and span ids of the context passed as a field.
func TestLogBridge_ExportsLogsWithTraceIDs(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t)
	var log *zap.Logger
	var svc ITracingService
	app := fxtest.New(t, fx.NopLogger,
		fx.Supply(zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(io.Discard), zap.InfoLevel))),
		fx.Supply(&Config{Exporter: ExporterConfig{Type: ExporterOTLP, Endpoint: rc.URL}}),
		Module, WithLogBridge,
		fx.Populate(&log, fx.Annotate(&svc, fx.ParamTags(`name:"TRACING_SERVICE"`))),
	)
	app.RequireStart()
	var traceID string
	_ = svc.WithSpan(context.Background(), "op", func(ctx context.Context) error {
		traceID = svc.GetCurrentSpan(ctx).SpanContext().TraceID().String()
		log.Info("charged the card", zap.Any("ctx", ctx), zap.String("payment", "pay_1"))
		return nil
	})
	app.RequireStop()
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for _, l := range rc.logs {
		if l.Body.GetStringValue() == "charged the card" {
			if hexID(l.TraceId) != traceID {
				t.Fatalf("log trace id %x, want %s", l.TraceId, traceID)
			}
			return
		}
	}
	t.Fatalf("log record not exported; got %d records", len(rc.logs))
}

// With a traces endpoint of its own path, the logs endpoint cannot be
// derived: the bridge says so instead of posting logs to the traces URL.
func TestLogBridge_UnknownLogsEndpointWarns(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zap.InfoLevel)
	app := fxtest.New(t, fx.NopLogger, fx.Supply(zap.New(core)),
		fx.Supply(Config{Exporter: ExporterConfig{Endpoint: "http://127.0.0.1:1/custom/traces"}}),
		Module, WithLogBridge, fx.Invoke(func(*zap.Logger) {}))
	app.RequireStart()
	app.RequireStop()
	const want = "tracing: the log bridge exports nothing: the traces endpoint http://127.0.0.1:1/custom/traces does not end in /v1/traces, so the logs endpoint is unknown; set OTEL_EXPORTER_OTLP_LOGS_ENDPOINT"
	if logs.FilterMessage(want).Len() != 1 {
		t.Fatalf("no warning %q in %v", want, logs.All())
	}
}

// An exporting Provider whose logs are not bridged does not hold the log
// pipeline's queue (about 1.6 MB); the first LoggerProvider call builds it,
// and Shutdown works either way.
func TestLogPipeline_BuiltOnlyWhenBridged(t *testing.T) {
	rc := newReceiver(t)
	const n = 8
	retained := func(f func() []*Provider) (perProvider uint64, ps []*Provider) {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		ps = f()
		runtime.GC()
		runtime.ReadMemStats(&after)
		if after.HeapAlloc < before.HeapAlloc {
			return 0, ps
		}
		return (after.HeapAlloc - before.HeapAlloc) / n, ps
	}
	unbridged, ps := retained(func() []*Provider {
		var ps []*Provider
		for range n {
			p, err := NewProvider(context.Background(), Config{Exporter: ExporterConfig{Endpoint: rc.URL}})
			if err != nil {
				t.Fatal(err)
			}
			ps = append(ps, p)
		}
		return ps
	})
	bridged, _ := retained(func() []*Provider {
		for _, p := range ps {
			if p.LoggerProvider() == nil {
				t.Fatal("an OTLP exporter without OTEL_LOGS_EXPORTER=none has no LoggerProvider")
			}
		}
		return ps
	})
	for _, p := range ps {
		if err := p.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	q, err := NewProvider(context.Background(), Config{Exporter: ExporterConfig{Endpoint: rc.URL}})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if q.LoggerProvider() != nil {
		t.Fatal("a LoggerProvider built after Shutdown would never be flushed")
	}
	t.Logf("retained per provider: %d B unbridged, %d B more once bridged", unbridged, bridged)
	if unbridged > 512<<10 {
		t.Fatalf("a Provider whose logs are not bridged retains %d B, want < 512 KiB", unbridged)
	}
	if bridged < 1<<20 {
		t.Fatalf("building the log pipeline retained only %d B: the measurement cannot tell it apart", bridged)
	}
}

// Found by an adversary: OTEL_EXPORTER_OTLP_LOGS_HEADERS was not read by
// tracingfx but by the log exporter itself, which printed a bad value,
// credential and all, to stderr and started anyway; over gRPC a header
// gRPC refuses passed start-up and every log export failed. It is read and
// checked like the other header variables now, and each signal gets its
// own headers: the generic ones, then its own variable's, then Config's.
func TestLogBridge_LogsHeadersCheckedAndSentToLogsOnly(t *testing.T) {
	const secret = "S3CRET-TOKEN"
	t.Setenv(envLogsHeaders, "authorization=Bearer%20"+secret+",oops")
	_, err := NewProvider(context.Background(), Config{Exporter: ExporterConfig{Endpoint: "http://127.0.0.1:1"}})
	if err == nil || !strings.Contains(err.Error(), "invalid "+envLogsHeaders+":") || strings.Contains(err.Error(), secret) {
		t.Errorf("%v, want start-up refused naming %s without the value", err, envLogsHeaders)
	}

	rc := newReceiver(t)
	t.Setenv(envHeaders, "x-all=generic")
	t.Setenv(envTracesHeaders, "x-traces=t")
	t.Setenv(envLogsHeaders, "x-logs=l,x-all=for-logs")
	var log *zap.Logger
	var svc ITracingService
	app := fxtest.New(t, fx.NopLogger, fx.Supply(zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(io.Discard), zap.InfoLevel))),
		fx.Supply(&Config{Exporter: ExporterConfig{Type: ExporterOTLP, Endpoint: rc.URL, Headers: map[string]string{"x-config": "c"}}}),
		Module, WithLogBridge,
		fx.Populate(&log, fx.Annotate(&svc, fx.ParamTags(`name:"TRACING_SERVICE"`))))
	app.RequireStart()
	_ = svc.WithSpan(context.Background(), "op", func(ctx context.Context) error {
		log.Info("charged", zap.Any("ctx", ctx))
		return nil
	})
	app.RequireStop()
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if len(rc.headers) == 0 || len(rc.logHeaders) == 0 {
		t.Fatalf("%d trace and %d log exports, want both", len(rc.headers), len(rc.logHeaders))
	}
	want := map[string]map[string]string{
		"traces": {"X-All": "generic", "X-Traces": "t", "X-Logs": "", "X-Config": "c"},
		"logs":   {"X-All": "for-logs", "X-Traces": "", "X-Logs": "l", "X-Config": "c"},
	}
	for signal, h := range map[string]http.Header{"traces": rc.headers[0], "logs": rc.logHeaders[0]} {
		for k, v := range want[signal] {
			if got := h.Get(k); got != v {
				t.Errorf("%s export: %s = %q, want %q", signal, k, got, v)
			}
		}
	}
}

// Found by an adversary (helper-75): the bridge exported the records below
// the application logger's level (a Debug line of an Info logger, which the
// application's own log never has). It exports what the application logs,
// under redisfx's scope, or a named logger's name (the otelzap bridge's rule).
func TestLogBridge_AtTheAppLoggersLevel_NamedLoggersScope(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t)
	core, own := observer.New(zap.InfoLevel)
	var log *zap.Logger
	app := fxtest.New(t, fx.NopLogger, fx.Supply(zap.New(core)),
		fx.Supply(&Config{Exporter: ExporterConfig{Type: ExporterOTLP, Endpoint: rc.URL}}),
		Module, WithLogBridge, fx.Populate(&log))
	app.RequireStart()
	log.Debug("below the level")
	log.With(zap.String("k", "v")).Debug("below the level, with a field")
	log.Info("at the level")
	log.Named("payments").Info("from a named logger")
	app.RequireStop()
	if own.FilterMessage("at the level").Len() != 1 || own.FilterMessageSnippet("below").Len() != 0 {
		t.Fatalf("the app's own log: %v", own.All())
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	scopes := map[string]string{}
	for i, l := range rc.logs {
		if body := l.Body.GetStringValue(); body != "tracing configured" { // the module's own line at start
			scopes[body] = rc.logScopes[i]
		}
	}
	want := map[string]string{"at the level": plugintrace.ScopeName, "from a named logger": "payments"}
	if len(scopes) != len(want) {
		t.Fatalf("exported %v, want %v", scopes, want)
	}
	for body, scope := range want {
		if scopes[body] != scope {
			t.Errorf("%q exported with scope %q, want %q", body, scopes[body], scope)
		}
	}
}
