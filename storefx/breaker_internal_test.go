package storefx

import (
	"context"
	"testing"
	"time"
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
	b.record(context.Background(), context.DeadlineExceeded) // opens: the probe goes out at once
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
	if st := b.stats(); st.Probes != 1 {
		t.Fatalf("probes %d, want the one", st.Probes)
	}
}
