package tracingfx

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

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
	var proc sdktrace.SpanProcessor = sdktrace.NewBatchSpanProcessor(discard{})
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
