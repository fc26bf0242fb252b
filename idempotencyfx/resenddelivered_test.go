package idempotencyfx

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redisfx/redisfx/internal/faultproxy"
)

// The claim lands while its connection is held up (its reply never comes);
// go-redis's ReadTimeout (1 s) re-sends it on another pooled connection,
// also held up, until StoreTimeout ends the request (500). The withdrawal,
// on a new connection, finds the first send's record in progress for that
// owner and deletes its fields, and must leave the marker x:<owner> as
// well: the held re-send then arrives (about a second later) and must take
// nothing, so that the retry runs. (Found by an adversary: no marker was
// left on that path, the re-send made a record no one ran, and the retry
// got 409 until the lease ended.)
func TestResendDelivered_AfterTheWithdrawalFoundTheClaimLanded_TakesNothing(t *testing.T) {
	l := newLostReplyEnv(t, Config{NoWait: true, StoreTimeout: 1800 * time.Millisecond, LockTimeout: 30 * time.Second})
	// Two idle, established command connections in the pool, for the
	// re-send to take (and be frozen with).
	ctx := context.Background()
	var wg sync.WaitGroup
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); _ = l.rdb.BLPop(ctx, time.Second, "resend-warm-none").Err() }()
	}
	wg.Wait()
	// go-redis's read timeout (1 s) re-sends the claim on an idle pooled
	// connection, frozen too; the request's StoreTimeout ends it.
	held, first := l.claimLandedReplyHeld(t, "k")
	r := <-first
	l.svc.late.running.Wait()
	if l.logs.FilterMessageSnippet("it was withdrawn").Len() == 0 {
		t.Fatal("the withdrawal did not find the claim landed: the test proves nothing")
	}
	for _, c := range held {
		c.SetMode(faultproxy.Forward) // the re-sent claim arrives
	}
	// Redis has read a connection's last bytes when the proxy sees it close
	// (the client had given up on it).
	waitFor(t, func() bool {
		for _, c := range l.proxy.Conns() {
			for _, h := range held {
				if c == h {
					return false
				}
			}
		}
		return true
	})
	rk := l.svc.StoreKey("", "k")
	if rec := l.srv.Client().HGetAll(ctx, rk).Val(); rec["s"] != "" {
		t.Fatalf("the re-sent claim, arriving after its withdrawal, made a record: %v", rec)
	}
	if r2 := l.post("/payments", "k", `{}`); r2.status != 201 {
		t.Fatalf("first %d; retry once Redis answers: %d %s (runs %d, the warm-up's)", r.status, r2.status, r2.body, l.calls.Load())
	}
}
