package idempotencyfx

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
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
		t.Run(name, func(t *testing.T) {
			l := newLostReplyEnv(t, cfg)
			admin := l.srv.Client()
			held, first := l.claimLandedReplyHeld(t, "k")
			setConfig(t, admin, "maxmemory", "1")
			for _, c := range held {
				c.Cut()
			}
			r := <-first
			setConfig(t, admin, "maxmemory", "0")
			l.svc.late.running.Wait() // the withdrawal landed
			l.breakerClosed(t)
			r2 := l.post("/payments", "k", `{}`)
			if r2.status != 201 || (cfg.ErrorPolicy != FailOpen && l.calls.Load() != 2) {
				t.Fatalf("first %d; retry once Redis is well: %d %s (runs %d, the warm-up's)", r.status, r2.status, r2.body, l.calls.Load())
			}
		})
	}
}

// A claim lands, its reply is lost; while the withdrawal runs, Redis refuses
// writes for a moment with NOREPLICAS (min-replicas-to-write, a replica
// lagging). The withdrawal must go on trying until Redis accepts writes
// again, so that the retry then runs. (Found by an adversary: NOREPLICAS was
// taken for a permanent refusal, the withdrawal gave up, and the retry got
// 409 with nothing running until the lease ended.)
func TestWithdrawal_RefusedWhileRedisCannotWrite_TriedUntilItCan(t *testing.T) {
	l := newLostReplyEnv(t, Config{NoWait: true, StoreTimeout: 2 * time.Second, LockTimeout: 30 * time.Second})
	admin := l.srv.Client()
	held, first := l.claimLandedReplyHeld(t, "k")
	setConfig(t, admin, "min-replicas-to-write", "1")
	for _, c := range held {
		c.Cut()
	}
	if r := <-first; r.status != 500 {
		t.Fatalf("first request: %d %s, want 500 (its claim's re-send refused)", r.status, r.body)
	}
	// The withdrawal has been refused at least once (the re-sent claim was
	// the first NOREPLICAS) before Redis accepts writes again.
	waitFor(t, func() bool { return noReplicasRefusals(admin) >= 2 })
	setConfig(t, admin, "min-replicas-to-write", "0")
	l.svc.late.running.Wait() // the withdrawal landed (or gave up)
	rk := l.svc.StoreKey("", "k")
	if rec := admin.HGetAll(context.Background(), rk).Val(); rec["s"] != "" {
		t.Fatalf("after the withdrawal the record is %v, want its fields removed", rec)
	}
	if r2 := l.post("/payments", "k", `{}`); r2.status != 201 {
		t.Fatalf("retry once Redis accepts writes: %d %s (handler runs %d, the warm-up's only)", r2.status, r2.body, l.calls.Load())
	}
}

func setConfig(t *testing.T, admin *redis.Client, name, value string) {
	t.Helper()
	if err := admin.ConfigSet(context.Background(), name, value).Err(); err != nil {
		t.Fatal(err)
	}
}

// noReplicasRefusals is how many commands Redis has refused with
// NOREPLICAS (INFO errorstats).
func noReplicasRefusals(admin *redis.Client) int {
	for _, line := range strings.Split(admin.Info(context.Background(), "errorstats").Val(), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "errorstat_NOREPLICAS:count="); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	return 0
}
