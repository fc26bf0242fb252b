package tracingfx

import (
	"context"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// One span with a string that is not UTF-8 (a request path /%ff, a
// User-Agent in Latin-1) made protobuf refuse the whole export request:
// every span of the batch was lost. Now the string is repaired and the
// batch arrives.
func TestExport_InvalidUTF8_DoesNotLoseTheBatch(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t)
	p, err := NewProvider(context.Background(), Config{Exporter: ExporterConfig{Type: ExporterOTLP, Endpoint: rc.URL}})
	if err != nil {
		t.Fatal(err)
	}
	tr := p.TracerProvider().Tracer("test")
	for i := 0; i < 5; i++ {
		_, s := tr.Start(context.Background(), "ok")
		s.End()
	}
	bad := "/\xff\xfe-path"
	_, s := tr.Start(context.Background(), "bad \xff name", trace.WithAttributes(
		attribute.String("url.path", bad), attribute.StringSlice("tags", []string{"ok", "t\xff"}),
		attribute.String("k\xffey", "v")))
	s.AddEvent("ev\xff", trace.WithAttributes(attribute.String("exception.message", bad)))
	s.SetStatus(codes.Error, "failed on "+bad)
	s.End()
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	spans := rc.got()
	if len(spans) != 6 {
		t.Fatalf("the backend got %d spans of 6", len(spans))
	}
	got := spanNamed(spans, "bad \uFFFD name")
	if got == nil {
		t.Fatalf("the span with an invalid name is missing: %v", spans)
	}
	if v := attrOf(got.Attributes, "url.path").GetStringValue(); v != "/\uFFFD-path" {
		t.Errorf("url.path = %q", v)
	}
	if v := attrOf(got.Attributes, "tags").GetArrayValue().GetValues(); len(v) != 2 || v[1].GetStringValue() != "t\uFFFD" {
		t.Errorf("tags = %v", v)
	}
	if attrOf(got.Attributes, "k\uFFFDey") == nil {
		t.Errorf("the attribute with an invalid key is missing: %v", got.Attributes)
	}
	if len(got.Events) != 1 || got.Events[0].Name != "ev\uFFFD" || !utf8.ValidString(got.Events[0].Attributes[0].Value.GetStringValue()) {
		t.Errorf("event = %v", got.Events)
	}
	if !strings.HasPrefix(got.Status.Message, "failed on /\uFFFD") {
		t.Errorf("status = %q", got.Status.Message)
	}
}

// The log bridge has the same guard: a log line with invalid UTF-8 does not
// lose the other records of its batch.
func TestExport_InvalidUTF8LogRecord_DoesNotLoseTheBatch(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t)
	p, err := NewProvider(context.Background(), Config{Exporter: ExporterConfig{Type: ExporterOTLP, Endpoint: rc.URL}})
	if err != nil {
		t.Fatal(err)
	}
	log := BridgeLogger(zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(io.Discard), zap.InfoLevel)), p)
	log.Info("first")
	log.Info("bad \xff line", zap.String("path", "/\xff"), zap.Strings("list", []string{"\xfe"}))
	log.Info("last")
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if len(rc.logs) != 3 {
		t.Fatalf("the backend got %d log records of 3", len(rc.logs))
	}
	if b := rc.logs[1].Body.GetStringValue(); b != "bad \uFFFD line" {
		t.Errorf("body = %q", b)
	}
}

// A backend that accepts connections and never answers: Shutdown returns
// at its deadline, and the export it gave up on no longer runs on for the
// export timeout (30 s): nothing of the provider is left running.
func TestExport_BlackholeBackend_NothingRunsAfterShutdown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c) // read nothing, answer nothing
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	for _, protocol := range []string{ProtocolHTTP, ProtocolGRPC} {
		p, err := NewProvider(context.Background(), Config{ShutdownTimeout: 300 * time.Millisecond,
			Exporter: ExporterConfig{Type: ExporterOTLP, Protocol: protocol, Endpoint: "http://" + ln.Addr().String()}})
		if err != nil {
			t.Fatal(err)
		}
		log := BridgeLogger(zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(io.Discard), zap.InfoLevel)), p)
		log.Info("a line")
		_, s := p.TracerProvider().Tracer("test").Start(context.Background(), "w")
		s.End()
		began := time.Now()
		_ = p.Shutdown(context.Background())
		if took := time.Since(began); took > 2*time.Second {
			t.Fatalf("%s: Shutdown took %v with ShutdownTimeout 300ms", protocol, took)
		}
		// Within 3 s, far below the 30 s export timeout the export used to
		// run on for, no goroutine of the processors or exporters is left.
		if stack := exportGoroutines(3 * time.Second); stack != "" {
			t.Fatalf("%s: an export still runs after Shutdown returned:\n%s", protocol, stack)
		}
	}
}

// exportGoroutines waits up to d for the goroutines of the SDK's batch
// processors and of the OTLP exporters to end, and returns their stacks if
// some are left.
func exportGoroutines(d time.Duration) string {
	deadline := time.Now().Add(d)
	for {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		var left []string
		for _, g := range strings.Split(string(buf), "\n\n") {
			if strings.Contains(g, "batchSpanProcessor") || strings.Contains(g, "otlptrace") || strings.Contains(g, "otlplog") ||
				strings.Contains(g, "sdk/log.(*BatchProcessor)") {
				left = append(left, g)
			}
		}
		if len(left) == 0 {
			return ""
		}
		if time.Now().After(deadline) {
			return strings.Join(left, "\n\n")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Valid spans, nearly all of them, are exported as they are: the guard,
// when a failed export calls it, allocates nothing for them, not even a
// wrapper per span.
func TestExport_ValidSpansPassWithoutACopy(t *testing.T) {
	spans := []sdktrace.ReadOnlySpan{tracetest.SpanStub{Name: "GET /payments",
		Attributes: []attribute.KeyValue{attribute.String("url.path", "/payments"), attribute.StringSlice("tags", []string{"a"})},
		Events:     []sdktrace.Event{{Name: "exception", Attributes: []attribute.KeyValue{attribute.String("exception.message", "ERR")}}},
		Status:     sdktrace.Status{Code: codes.Error, Description: "failed"}}.Snapshot()}
	allocs := testing.AllocsPerRun(100, func() {
		if out := validSpans(spans); out != nil {
			t.Fatal("a valid span was copied")
		}
	})
	if allocs > 1 { // the tags slice is read as a copy (attribute.Value.AsStringSlice)
		t.Fatalf("%v allocations per batch of one valid span", allocs)
	}
}

// Found by an adversary (helper-76): an instrumentation scope that is not
// valid UTF-8 (an application's tracer named in Latin-1, its version, its
// attributes) and a named logger's name, which the log bridge takes as its
// scope, lost every span or record of their batch.
func TestExport_InvalidUTF8Scope_DoesNotLoseTheBatch(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t)
	p, err := NewProvider(context.Background(), Config{Exporter: ExporterConfig{Type: ExporterOTLP, Endpoint: rc.URL}})
	if err != nil {
		t.Fatal(err)
	}
	tp := p.TracerProvider()
	for _, tr := range []trace.Tracer{
		tp.Tracer("good"),
		tp.Tracer("caf\xe9"),
		tp.Tracer("versioned", trace.WithInstrumentationVersion("1.\xff"), trace.WithSchemaURL("https://x/\xfe"),
			trace.WithInstrumentationAttributes(attribute.String("team", "caf\xe9"))),
	} {
		_, s := tr.Start(context.Background(), "op")
		s.End()
	}
	log := BridgeLogger(zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(io.Discard), zap.InfoLevel)), p)
	log.Info("first")
	log.Named("caf\xe9").Info("named in Latin-1")
	log.Info("last")
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if len(rc.spans) != 3 || len(rc.logs) != 3 {
		t.Fatalf("the backend got %d spans of 3 and %d log records of 3", len(rc.spans), len(rc.logs))
	}
	for _, scope := range rc.logScopes {
		if !utf8.ValidString(scope) {
			t.Errorf("log scope %q", scope)
		}
	}
}

// The resource's own strings are made valid too: the default service name
// holds the binary's file name, which need not be UTF-8 (helper-76: every
// export of such a binary was refused).
func TestValidResource_RepairsTheDefaultServiceName(t *testing.T) {
	t.Parallel()
	res := resource.NewWithAttributes("https://opentelemetry.io/schemas/1.26.0",
		attribute.String("service.name", "unknown_service:caf\xe9.test"), attribute.String("host.name", "h"))
	got := validResource(res)
	name, _ := got.Set().Value("service.name")
	if name.AsString() != "unknown_service:caf\uFFFD.test" || got.SchemaURL() != res.SchemaURL() || got.Len() != 2 {
		t.Fatalf("resource %v", got)
	}
	if ok := resource.NewSchemaless(attribute.String("service.name", "svc")); validResource(ok) != ok {
		t.Fatal("a valid resource was copied")
	}
}
