package idempotencyfx

import (
	"context"
	"testing"
	"time"

	"github.com/redisfx/redisfx/internal/obstest"
	"github.com/redisfx/redisfx/internal/redistest"
)

// Found by an adversary: Start's checks (PUBLISH for the channel
// permission, INFO for the eviction policy) made two root traces at every
// start, and each lease renewal of a slow handler made one more, though
// docs/tracing.md says work nobody asked for starts no trace. With the real
// command hook: a start, then a handler that lives through several
// renewals, make spans only in the request's own trace.
func TestSpans_StartAndRenewalsMakeNoTraceOfTheirOwn(t *testing.T) {
	t.Parallel()
	rdb, tp, rec := obstest.TracedStore(t, redistest.Start(t).URL())
	const lockTimeout = 300 * time.Millisecond
	svc, err := New(rdb, Config{KeyPrefix: redistest.Prefix(t), DefaultTTL: time.Hour, LockTimeout: lockTimeout}, WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Close() })
	if err := svc.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, request := tp.Tracer("test").Start(context.Background(), "request")
	_, _, err = svc.Do(ctx, "slow", "fp", func(context.Context) ([]byte, error) {
		time.Sleep(4 * lockTimeout / 3) // the slow handler under test: its lease is renewed 3-4 times
		return []byte("done"), nil
	})
	request.End()
	if err != nil {
		t.Fatal(err)
	}
	want := request.SpanContext().TraceID()
	var inTrace int
	for _, sp := range rec.Ended() {
		if sp.SpanContext().TraceID() != want {
			t.Errorf("span %q (%v) is in a trace of its own", sp.Name(), sp.Attributes())
			continue
		}
		inTrace++
	}
	if inTrace < 3 { // request, claim, complete at least
		t.Fatalf("%d spans in the request's trace, want the request and its commands", inTrace)
	}
}
