package storefx

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Close ends a probe in flight whatever it is doing: closing the client
// ends one waiting for an answer, and the probe's context, cancelled at
// shutdown, ends one still dialling (go-redis's dial retries watch only
// the context). Before, the probe's context came from Background: with
// Redis's address dropping SYNs, Close waited the whole ProbeTimeout
// (found by an adversary: a stop past its 1 s deadline). The ping here
// stands for a dial that hangs until its context ends.
func TestBreaker_ShutdownEndsAProbeInFlight(t *testing.T) {
	b := newBreaker(BreakerConfig{Failures: 1, ProbeTimeout: 5 * time.Second})
	dialling := make(chan struct{})
	b.ping = func(ctx context.Context) error {
		close(dialling)
		<-ctx.Done()
		return ctx.Err()
	}
	b.record(context.Background(), failed) // opens: the probe goes out at once
	<-dialling
	done := make(chan struct{})
	go func() {
		b.shutdownProbes()
		b.inflight.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("the probe in flight was still running 2 s after shutdown (its ProbeTimeout is 5 s)")
	}
	if n := b.probes.Load(); n != 1 {
		t.Fatalf("probes %d, want the one", n)
	}
}

// A dial go-redis runs in a goroutine of its own for a caller that gave up
// ends when the client is closed, and none starts after. Before, closing
// the pool left it dialling a Redis that drops SYNs for up to five tries
// of DialTimeout (25 s by default), logging warnings after the stop (found
// by an adversary). next stands for a connect that hangs until its context
// ends.
func TestBreaker_ShutdownEndsDialsInFlight(t *testing.T) {
	b := newBreaker(BreakerConfig{})
	connecting := make(chan struct{})
	dial := b.DialHook(func(ctx context.Context, _, _ string) (net.Conn, error) {
		close(connecting)
		<-ctx.Done()
		return nil, ctx.Err()
	})
	ended := make(chan error, 1)
	go func() {
		_, err := dial(context.Background(), "tcp", "192.0.2.1:6379")
		ended <- err
	}()
	<-connecting
	b.shutdownProbes()
	select {
	case err := <-ended:
		if err == nil {
			t.Fatal("the dial in flight succeeded")
		}
	case <-time.After(2 * time.Second):
		t.Fatal("the dial in flight was still running 2 s after the client was closed")
	}
	if _, err := dial(context.Background(), "tcp", "192.0.2.1:6379"); !errors.Is(err, redis.ErrClosed) {
		t.Fatalf("a dial after Close: %v, want redis.ErrClosed", err)
	}
}
