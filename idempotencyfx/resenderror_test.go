package idempotencyfx

import (
	"context"
	"testing"
	"time"

	"github.com/redisfx/redisfx/internal/faultproxy"
	"github.com/redisfx/redisfx/internal/redistest"
)

// The claim lands, its reply is lost (connection reset), go-redis re-sends
// it, and the re-send gets an error reply from Redis (here OOM: Redis hit
// maxmemory meanwhile). The last error is a Redis error reply, yet the
// first send landed: the claim must be withdrawn, so that the retry, once
// Redis is well, runs. (Found by an adversary: an error reply was taken for
// "not run", and the retry got 409 until the lease ended.)
func TestResendGetsAnErrorReply_FirstSendLanded_Withdrawn(t *testing.T) {
	for name, cfg := range map[string]Config{
		"nowait":           {NoWait: true, StoreTimeout: 2 * time.Second, LockTimeout: 30 * time.Second},
		"waiters-failopen": {WaitTimeout: time.Second, ErrorPolicy: FailOpen, StoreTimeout: 2 * time.Second, LockTimeout: 30 * time.Second},
	} {
		t.Run(name, func(t *testing.T) { advErrReply(t, cfg) })
	}
}

func advErrReply(t *testing.T, cfg Config) {
	srv := redistest.StartPrivate(t)
	p := faultproxy.Start(t, srv.Addr())
	e := newEnvAt(t, cfg, srv, "redis://"+p.Addr())
	ctx := context.Background()
	admin := srv.Client()
	if r := e.post("/payments", "warm", `{}`); r.status != 201 {
		t.Fatalf("warm-up: %d", r.status)
	}
	slept := make(chan struct{})
	go func() { defer close(slept); _ = admin.Do(ctx, "DEBUG", "SLEEP", "0.5").Err() }()
	time.Sleep(50 * time.Millisecond)
	first := make(chan reply, 1)
	go func() { first <- e.post("/payments", "k", `{}`) }()
	time.Sleep(150 * time.Millisecond) // the claim waits in Redis's socket
	held := p.Conns()
	for _, c := range held {
		c.SetMode(faultproxy.Freeze) // the reply, once Redis wakes, is held
	}
	<-slept
	time.Sleep(100 * time.Millisecond) // Redis ran the claim
	rk := e.svc.StoreKey("", "k")
	t.Logf("after the first send: %v", admin.HGetAll(ctx, rk).Val())
	if err := admin.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	for _, c := range held {
		c.Cut()
	}
	r := <-first
	if err := admin.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	e.svc.late.running.Wait()
	t.Logf("first request: %d %s; withdrawal logs: landed %d, marked? record %v", r.status, r.body,
		e.logs.FilterMessageSnippet("it was withdrawn").Len(), admin.HGetAll(ctx, rk).Val())
	time.Sleep(300 * time.Millisecond)
	r2 := e.post("/payments", "k", `{}`)
	if r2.status != 201 || (cfg.ErrorPolicy != FailOpen && e.calls.Load() != 2) {
		t.Fatalf("first %d; retry once Redis is well: %d %s (runs %d, the warm-up's)", r.status, r2.status, r2.body, e.calls.Load())
	}
}
