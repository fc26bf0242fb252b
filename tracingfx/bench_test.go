package tracingfx

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/redisfx/redisfx/internal/redistest"
	"github.com/redisfx/redisfx/storefx"
)

// discard is an exporter that drops everything: the cost measured is ours
// and the SDK's, not a backend's.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

func benchGET(b *testing.B, tp *sdktrace.TracerProvider) {
	srv := redistest.Start(b)
	var inst []storefx.Instrumentation
	if tp != nil {
		inst = append(inst, Instrumentation(tp, SpanConfig{}, nil))
		b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	}
	c, err := storefx.New("default", storefx.Config{URL: srv.URL()}, inst...)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	key := redistest.Prefix(b) + "k"
	c.Set(ctx, key, "v", 0)
	b.ReportAllocs()
	b.SetParallelism(16) // 32 clients on 2 cores: CPU-bound, so overhead shows in ns/op
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			_ = c.Get(ctx, key).Err()
		}
	})
	b.StopTimer()
	c.Del(ctx, key)
}

func provider(s sdktrace.Sampler, keep bool) *sdktrace.TracerProvider {
	proc := sdktrace.NewBatchSpanProcessor(discard{})
	if keep {
		proc = &keeper{SpanProcessor: proc, errors: true}
		s = recordAll{s}
	}
	return sdktrace.NewTracerProvider(sdktrace.WithSampler(s), sdktrace.WithSpanProcessor(proc))
}

func BenchmarkGET_NoHook(b *testing.B)        { benchGET(b, nil) }
func BenchmarkGET_HookUnsampled(b *testing.B) { benchGET(b, provider(sdktrace.NeverSample(), false)) }
func BenchmarkGET_HookSampled(b *testing.B)   { benchGET(b, provider(sdktrace.AlwaysSample(), false)) }
func BenchmarkGET_HookRatio10(b *testing.B) {
	benchGET(b, provider(sdktrace.TraceIDRatioBased(0.1), false))
}
func BenchmarkGET_HookRatio10Keep(b *testing.B) {
	benchGET(b, provider(sdktrace.TraceIDRatioBased(0.1), true))
}

// The hook alone, without the network: what tracing adds to each command,
// in CPU time. Compare with BenchmarkGET_NoHook, the CPU and wall time of a
// whole GET.
func benchHook(b *testing.B, tp *sdktrace.TracerProvider) {
	var next redis.ProcessHook = func(context.Context, redis.Cmder) error { return nil }
	if tp != nil {
		h := Instrumentation(tp, SpanConfig{}, nil)(storefx.ClientInfo{Name: "default", Addrs: []string{"127.0.0.1:6379"}, Node: "127.0.0.1:6379", Network: "tcp"})
		next = h.ProcessHook(next)
		b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		_ = next(ctx, redis.NewStringCmd(ctx, "get", "user:42"))
	}
}

func BenchmarkHook_None(b *testing.B)      { benchHook(b, nil) }
func BenchmarkHook_Unsampled(b *testing.B) { benchHook(b, provider(sdktrace.NeverSample(), false)) }
func BenchmarkHook_Ratio10(b *testing.B) {
	benchHook(b, provider(sdktrace.TraceIDRatioBased(0.1), false))
}
func BenchmarkHook_Sampled(b *testing.B) { benchHook(b, provider(sdktrace.AlwaysSample(), false)) }
func BenchmarkHook_Ratio10Keep(b *testing.B) {
	benchHook(b, provider(sdktrace.TraceIDRatioBased(0.1), true))
}

// BenchmarkGET_Sequential is one GET at a time: the wall time of a round
// trip, the denominator of the overhead ratios.
func BenchmarkGET_Sequential(b *testing.B) {
	srv := redistest.Start(b)
	c, err := storefx.New("default", storefx.Config{URL: srv.URL()})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	for b.Loop() {
		_ = c.Get(ctx, "k").Err()
	}
}

// BenchmarkValidateSpan_Typical is the UTF-8 guard on a SERVER span as
// httpfx records it (13 attributes, all valid): run on every exported span.
func BenchmarkValidateSpan_Typical(b *testing.B) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	_, s := tp.Tracer("t").Start(context.Background(), "POST /payments")
	s.SetAttributes(attribute.String("client.address", "127.0.0.1"), attribute.String("http.request.method", "POST"),
		attribute.Int("http.response.body.size", 89), attribute.String("http.route", "/payments"),
		attribute.String("network.peer.address", "127.0.0.1"), attribute.Int("network.peer.port", 43112),
		attribute.String("network.protocol.version", "1.1"), attribute.String("redisfx.idempotency.outcome", "replay"),
		attribute.String("server.address", "127.0.0.1"), attribute.Int("server.port", 9077), attribute.String("url.path", "/payments"),
		attribute.String("url.scheme", "http"), attribute.String("user_agent.original", "payments-client/2.1"))
	s.End()
	span := exp.GetSpans().Snapshots()[0]
	b.ReportAllocs()
	for b.Loop() {
		if !spanValid(span) {
			b.Fatal("a valid span is found invalid")
		}
	}
}
