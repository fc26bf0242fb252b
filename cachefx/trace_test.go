package cachefx

import (
	"context"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/redisfx/redisfx/internal/obstest"
	"github.com/redisfx/redisfx/internal/redistest"
)

// On a miss, the load's Redis commands (the lease, its store) sat directly
// under the request's SERVER span: GetOrLoad opened no span for the load.
// Now they nest in cache.load, a sibling of cache.get under the request,
// and so do the loader's own spans. Real command hook, real redis-server.
func TestSpans_LoadCommandsNestInCacheLoad(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb, tp, rec := obstest.TracedStore(t, srv.URL())
	prefix := redistest.Prefix(t)
	c := newCache(t, rdb, Config{KeyPrefix: prefix, LoadWait: 100 * time.Millisecond}, WithTracerProvider(tp))
	other := newCache(t, client(t, srv), Config{KeyPrefix: prefix})
	ctx, request := tp.Tracer("test").Start(context.Background(), "GET /payments/{id}", trace.WithSpanKind(trace.SpanKindServer))
	// A miss that loads (lease, store), then a miss that waits for another
	// process's lease (polling), then gives up and loads itself.
	if _, err := c.GetOrLoad(ctx, "p1", time.Minute, func(ctx context.Context) ([]byte, error) {
		_, db := tp.Tracer("test").Start(ctx, "db.query")
		db.End()
		return []byte("v"), nil
	}, "payments"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := other.takeLease(context.Background(), other.valueKey("p2"), "another-process"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetOrLoad(ctx, "p2", time.Minute, func(context.Context) ([]byte, error) { return []byte("v"), nil }); err != nil {
		t.Fatal(err)
	}
	request.End()

	byID := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		byID[s.SpanContext().SpanID()] = s
	}
	parent := func(s sdktrace.ReadOnlySpan) string {
		if p, ok := byID[s.Parent().SpanID()]; ok {
			return p.Name()
		}
		return "(none)"
	}
	counts := map[string]int{}
	for _, s := range rec.Ended() {
		name := s.Name()
		switch {
		case strings.HasPrefix(name, "redis."):
			counts["redis"]++
			if p := parent(s); !strings.HasPrefix(p, "cache.") {
				t.Errorf("%s (%v) is under %q, want a cache span", name, s.Attributes(), p)
			}
		case name == "cache.get", name == "cache.load":
			counts[name]++
			if p := parent(s); p != "GET /payments/{id}" {
				t.Errorf("%s is under %q, want the request span", name, p)
			}
		case name == "db.query":
			if p := parent(s); p != "cache.load" {
				t.Errorf("the loader's span is under %q, want cache.load", p)
			}
		}
	}
	if counts["cache.get"] != 2 || counts["cache.load"] != 2 || counts["redis"] < 6 {
		t.Fatalf("spans %v: want 2 cache.get, 2 cache.load and their commands", counts)
	}
}
