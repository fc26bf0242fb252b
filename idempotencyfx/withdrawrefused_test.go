package idempotencyfx

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisfx/redisfx/internal/faultproxy"
	"github.com/redisfx/redisfx/internal/redistest"
)

// A claim lands, its reply is lost; while the withdrawal runs, Redis refuses
// writes for a moment with NOREPLICAS (min-replicas-to-write, a replica
// lagging). The withdrawal must go on trying until Redis accepts writes
// again, so that the retry then runs. (Found by an adversary: NOREPLICAS was
// taken for a permanent refusal, the withdrawal gave up, and the retry got
// 409 with nothing running until the lease ended.)
func TestWithdrawal_RefusedWhileRedisCannotWrite_TriedUntilItCan(t *testing.T) {
	cfg := Config{NoWait: true, StoreTimeout: 2 * time.Second, LockTimeout: 30 * time.Second}
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
	time.Sleep(150 * time.Millisecond)
	held := p.Conns()
	for _, c := range held {
		c.SetMode(faultproxy.Freeze)
	}
	<-slept
	time.Sleep(100 * time.Millisecond)
	rk := e.svc.StoreKey("", "k")
	t.Logf("after the first send: %v", admin.HGetAll(ctx, rk).Val())
	if err := admin.ConfigSet(ctx, "min-replicas-to-write", "1").Err(); err != nil {
		t.Fatal(err)
	}
	for _, c := range held {
		c.Cut()
	}
	r := <-first
	if r.status != 500 {
		t.Fatalf("first request: %d %s, want 500 (its claim's re-send refused)", r.status, r.body)
	}
	// The withdrawal has been refused at least once (the re-sent claim was
	// the first NOREPLICAS) before Redis accepts writes again.
	for noReplicasRefusals(t, admin) < 2 {
		time.Sleep(10 * time.Millisecond)
	}
	if err := admin.ConfigSet(ctx, "min-replicas-to-write", "0").Err(); err != nil {
		t.Fatal(err)
	}
	e.svc.late.running.Wait() // the withdrawal landed (or gave up)
	if rec := admin.HGetAll(ctx, rk).Val(); rec["s"] != "" {
		t.Fatalf("after the withdrawal the record is %v, want its fields removed", rec)
	}
	r2 := e.post("/payments", "k", `{}`)
	if r2.status != 201 {
		t.Fatalf("retry once Redis accepts writes: %d %s (handler runs %d, the warm-up's only); record %v", r2.status, r2.body, e.calls.Load(), admin.HGetAll(ctx, rk).Val())
	}
}

// noReplicasRefusals is how many commands Redis has refused with
// NOREPLICAS (INFO errorstats).
func noReplicasRefusals(t *testing.T, admin *redis.Client) int {
	t.Helper()
	info := admin.Info(context.Background(), "errorstats").Val()
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "errorstat_NOREPLICAS:count="); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	return 0
}
