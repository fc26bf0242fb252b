package lockfx

import (
	"context"
	"testing"
	"time"

	"github.com/redisfx/redisfx/internal/obstest"
	"github.com/redisfx/redisfx/internal/redistest"
)

// Each renewal of an auto-renewed lock made a root trace of its own (its
// context was context.Background()): a lock held for a minute with a 10 s
// TTL left 18 one-span traces. Renewals are the holder's housekeeping, as
// docs/tracing.md counts background work: with the real command hook, a
// lock held through several renewals makes spans only in its caller's
// trace.
func TestSpans_RenewalsMakeNoTraceOfTheirOwn(t *testing.T) {
	t.Parallel()
	rdb, tp, rec := obstest.TracedStore(t, redistest.Start(t).URL())
	const ttl = 300 * time.Millisecond
	l := mustNew(t, rdb, Config{KeyPrefix: redistest.Prefix(t), TTL: ttl, AutoRenew: true, Attempts: 1}, WithTracerProvider(tp))
	ctx, caller := tp.Tracer("test").Start(context.Background(), "caller")
	k, err := l.Acquire(ctx, "held")
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(4 * ttl / 3) // held through 3-4 renewals: the behaviour under test
	if err := k.Release(ctx); err != nil {
		t.Fatal(err)
	}
	caller.End()
	want := caller.SpanContext().TraceID()
	for _, sp := range rec.Ended() {
		if sp.SpanContext().TraceID() != want {
			t.Errorf("span %q (%v) is in a trace of its own", sp.Name(), sp.Attributes())
		}
	}
	if len(rec.Ended()) < 3 {
		t.Fatalf("%d spans, want the caller, the acquire and the release at least", len(rec.Ended()))
	}
}
