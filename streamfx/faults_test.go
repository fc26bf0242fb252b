package streamfx

import (
	"context"
	"testing"
	"time"

	"github.com/redisfx/redisfx/internal/redistest"
)

// Redis restarts empty (no persistence): the stream and its group are
// gone. The consumer notices (NOGROUP), creates the group again, and
// handles what is published after the restart.
func TestRedisRestartedEmpty_ConsumerRecovers(t *testing.T) {
	t.Parallel()
	srv := redistest.StartPrivate(t)
	stream := redistest.Prefix(t) + "restart"
	s := newStreams(t, srv, Config{ClaimIdle: 200 * time.Millisecond, StoreTimeout: 300 * time.Millisecond})
	got := make(chan string, 10)
	_ = s.Handle(stream, func(_ context.Context, m Message) error { got <- string(m.Data); return nil })
	start(t, s)
	ctx := context.Background()
	if _, err := s.Publish(ctx, stream, []byte("before")); err != nil {
		t.Fatal(err)
	}
	if m := <-got; m != "before" {
		t.Fatalf("got %q", m)
	}
	srv.Restart() // killed, started again with nothing in it
	deadline := time.Now().Add(15 * time.Second)
	for {
		if _, err := s.Publish(ctx, stream, []byte("after")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("publish never worked again after the restart")
		}
		time.Sleep(50 * time.Millisecond)
	}
	select {
	case m := <-got:
		if m != "after" {
			t.Fatalf("got %q", m)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the consumer did not recover from the restart")
	}
}
