package streamfx

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/redisfx/redisfx/internal/obstest"
	"github.com/redisfx/redisfx/internal/redistest"
)

// Issue 19: an idle consumer made a root trace per poll (XREADGROUP,
// XPENDING, XCLAIM, the backlog refresh). Its background commands make no
// command span now: idle for a second, with the real command hook, no span
// at all; a handled message gives stream.consume and stream.ack, all in
// the publisher's trace.
func TestSpans_IdleConsumerMakesNoSpans(t *testing.T) {
	t.Parallel()
	rdb, tp, rec := obstest.TracedStore(t, redistest.Start(t).URL())
	stream := redistest.Prefix(t) + "idle"
	s, err := New(rdb, Config{ClaimIdle: 100 * time.Millisecond}, WithTracerProvider(tp), WithRegisterer(prometheus.NewRegistry()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	handled := make(chan struct{})
	_ = s.Handle(stream, func(context.Context, Message) error { close(handled); return nil })
	start(t, s)
	time.Sleep(time.Second) // idle: reads every 50ms, claims every 50ms, one backlog refresh
	if n := len(rec.Ended()); n != 0 {
		t.Fatalf("an idle consumer made %d spans, first %q", n, rec.Ended()[0].Name())
	}
	if _, err := s.Publish(context.Background(), stream, []byte("x")); err != nil {
		t.Fatal(err)
	}
	wait(t, handled, 10*time.Second, "the message")
	if err := s.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	names := map[string]int{}
	var publish sdktrace.ReadOnlySpan
	for _, sp := range rec.Ended() {
		names[sp.Name()]++
		if sp.Name() == "stream.publish" {
			publish = sp
		}
	}
	if publish == nil || names["stream.consume"] != 1 || names["stream.ack"] != 1 {
		t.Fatalf("spans %v", names)
	}
	for _, sp := range rec.Ended() {
		if sp.SpanContext().TraceID() != publish.SpanContext().TraceID() {
			t.Errorf("span %q outside the message's trace", sp.Name())
		}
	}
}
