package idempotencyfx

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redisfx/redisfx/internal/faultproxy"
	"github.com/redisfx/redisfx/internal/redistest"
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
	srv := redistest.StartPrivate(t)
	p := faultproxy.Start(t, srv.Addr())
	e := newEnvAt(t, Config{NoWait: true, StoreTimeout: 1800 * time.Millisecond, LockTimeout: 30 * time.Second}, srv, "redis://"+p.Addr())
	ctx := context.Background()
	admin := srv.Client()
	if r := e.post("/payments", "warm", `{}`); r.status != 201 {
		t.Fatalf("warm-up: %d", r.status)
	}
	// Two idle, established command connections in the pool.
	var wg sync.WaitGroup
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); _ = e.rdb.BLPop(ctx, time.Second, "resend-warm-none").Err() }()
	}
	wg.Wait()
	slept := make(chan struct{})
	go func() { defer close(slept); _ = admin.Do(ctx, "DEBUG", "SLEEP", "0.5").Err() }()
	time.Sleep(50 * time.Millisecond)
	first := make(chan reply, 1)
	go func() { first <- e.post("/payments", "k", `{}`) }()
	time.Sleep(150 * time.Millisecond) // the claim waits in Redis's socket
	held := p.Conns()
	for _, c := range held {
		c.SetMode(faultproxy.Freeze) // the existing ones only; new ones forward
	}
	t.Logf("%d connections frozen", len(held))
	<-slept
	time.Sleep(100 * time.Millisecond)
	rk := e.svc.StoreKey("", "k")
	t.Logf("after first send: %v", admin.HGetAll(ctx, rk).Val())
	// go-redis's read timeout (1 s) re-sends the claim on an idle pooled
	// connection: frozen; the request's StoreTimeout ends it.
	r := <-first
	e.svc.late.running.Wait()
	if e.logs.FilterMessageSnippet("it was withdrawn").Len() == 0 {
		t.Fatal("the withdrawal did not find the claim landed: proves nothing")
	}
	t.Logf("first request: %d %s; withdrawn-landed logs %d; record now %v", r.status, r.body,
		e.logs.FilterMessageSnippet("it was withdrawn").Len(), admin.HGetAll(ctx, rk).Val())
	for _, c := range held {
		c.SetMode(faultproxy.Forward) // the re-sent claim arrives
	}
	time.Sleep(300 * time.Millisecond)
	t.Logf("after the re-send arrives: %v pttl %v", admin.HGetAll(ctx, rk).Val(), admin.PTTL(ctx, rk).Val())
	p.SetMode(faultproxy.Forward)
	time.Sleep(300 * time.Millisecond)
	r2 := e.post("/payments", "k", `{}`)
	if r2.status != 201 {
		t.Fatalf("first %d; retry once Redis answers: %d %s (runs %d, the warm-up's)", r.status, r2.status, r2.body, e.calls.Load())
	}
}
