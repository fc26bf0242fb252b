package streamfx

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redisfx/redisfx/internal/redistest"
)

// A handler that leaves by runtime.Goexit (t.FailNow in a handler under
// test) fails like a panic: its slot is freed, the message is not
// acknowledged and is retried after ClaimIdle, then dead-lettered after
// MaxAttempts; the consumer goes on with the others.
func TestHandlerGoexit_IsAFailure_TheConsumerGoesOn(t *testing.T) {
	t.Parallel()
	srv := redistest.StartPrivate(t)
	stream := redistest.Prefix(t) + "goexit"
	ctx := context.Background()
	s := newStreams(t, srv, Config{Concurrency: 1, MaxAttempts: 2, ClaimIdle: 100 * time.Millisecond})
	var mu sync.Mutex
	attempts := map[string][]int{}
	ok := make(chan struct{})
	_ = s.Handle(stream, func(_ context.Context, m Message) error {
		mu.Lock()
		attempts[string(m.Data)] = append(attempts[string(m.Data)], m.Attempt)
		mu.Unlock()
		if string(m.Data) == "doomed" || m.Attempt == 1 {
			runtime.Goexit()
		}
		ok <- struct{}{}
		return nil
	})
	start(t, s)
	for i := range 5 {
		if _, err := s.Publish(ctx, stream, []byte(fmt.Sprint("m", i))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Publish(ctx, stream, []byte("doomed")); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		select {
		case <-ok:
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of 5 messages handled in 10s after their first attempt called Goexit", i)
		}
	}
	raw := srv.Client()
	deadline := time.Now().Add(10 * time.Second)
	for raw.XLen(ctx, stream+DLQSuffix).Val() != 1 || pendingCount(t, srv, stream, "redisfx") != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("dead-letter entries %d, pending %d: want the doomed message dead-lettered, nothing pending",
				raw.XLen(ctx, stream+DLQSuffix).Val(), pendingCount(t, srv, stream, "redisfx"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if e := raw.XRange(ctx, stream+DLQSuffix, "-", "+").Val(); len(e) != 1 || !strings.Contains(fmt.Sprint(e[0].Values[FieldError]), "Goexit") {
		t.Errorf("dead-letter entry %+v, want its error to name Goexit", e)
	}
	if err := s.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for k, a := range attempts {
		if want := []int{1, 2}; fmt.Sprint(a) != fmt.Sprint(want) {
			t.Errorf("%s ran as attempts %v, want %v", k, a, want)
		}
	}
}
