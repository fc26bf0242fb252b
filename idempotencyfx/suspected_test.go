package idempotencyfx

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redisfx/redisfx/internal/redistest"
)

// Issue 14, suspected (proved), then fixed: a claim whose reply is lost to
// StoreTimeout still lands when Redis was only slow (DEBUG SLEEP: the
// command waits in the socket and runs after the sleep). It left the key in
// progress with no living owner: the request got 500 (fail-closed, "not
// processed, retry with the same key"), yet its retries got 409 until the
// lease ran out (an adversary reproduced it against the payments example).
// The claim is now withdrawn in the background: once Redis answers again
// the record is gone, and the retry runs at once, exactly once. Under
// fail-open the first request ran the handler unprotected, so the retry
// runs it a second time: the same double execution as any fail-open
// request retried after an outage (see docs/operations.md).
func TestClaimReplyLost_ClaimWithdrawn_RetryRunsAtOnce(t *testing.T) {
	t.Parallel()
	for _, policy := range []ErrorPolicy{FailClosed, FailOpen} {
		t.Run(string(policy), func(t *testing.T) {
			t.Parallel()
			srv := redistest.StartPrivate(t)
			e := newEnv(t, Config{ErrorPolicy: policy, StoreTimeout: 200 * time.Millisecond, LockTimeout: time.Minute, NoWait: true}, srv)
			var runs atomic.Int64
			e.setHandler(func(w http.ResponseWriter, r *http.Request) {
				if strings.HasPrefix(r.Header.Get("Idempotency-Key"), "orphan-") {
					runs.Add(1)
				}
				w.WriteHeader(201)
			})
			key := orphanClaim(t, e, srv, policy)
			unprotected := runs.Load() // fail-open: the runs without protection
			if rec := e.record(key); rec != nil {
				t.Fatalf("after the withdrawal the record is %+v, want none", rec)
			}
			if r := e.post("/payments", key, `{}`); r.status != 201 {
				t.Fatalf("retry once Redis answers again: %d %s (want the run, not 409 until the lease of a claim no one runs)", r.status, r.body)
			}
			if n := runs.Load() - unprotected; n != 1 {
				t.Fatalf("the retry ran the handler %d times, want 1", n)
			}
			if r := e.post("/payments", key, `{}`); r.status != 201 || runs.Load()-unprotected != 1 {
				t.Fatalf("second retry: %d, runs %d (want the replay)", r.status, runs.Load()-unprotected)
			}
		})
	}
}

// A withdrawn claim that reaches Redis after its withdrawal takes nothing:
// the marker refuses it, and the key stays free for the retry. The marker's
// key, when the withdrawal made it, expires.
func TestClaimWithdrawnBeforeItArrives_TakesNothing(t *testing.T) {
	t.Parallel()
	srv := redistest.StartPrivate(t)
	e := newEnv(t, Config{StoreTimeout: 200 * time.Millisecond, LockTimeout: time.Second}, srv)
	ctx := context.Background()
	key := e.svc.StoreKey("", "late-claim")
	landed, err := e.svc.store.abandon(ctx, key, "owner-a", 5*time.Second)
	if err != nil || landed {
		t.Fatalf("withdrawal before the claim: landed %v, err %v", landed, err)
	}
	if ttl := srv.Client().PTTL(ctx, key).Val(); ttl <= 0 || ttl > 5*time.Second {
		t.Fatalf("the marker's key has PTTL %v, want within 5s", ttl)
	}
	c, _, err := e.svc.store.claim(ctx, key, "fp", "owner-a", time.Second, false)
	if err != nil || c.kind != claimWithdrawn {
		t.Fatalf("the late claim: %+v, %v (want withdrawn)", c, err)
	}
	if rec := e.record("late-claim"); rec != nil {
		t.Fatalf("the late claim made a record: %+v", rec)
	}
	c, _, err = e.svc.store.claim(ctx, key, "fp", "owner-b", time.Second, false)
	if err != nil || c.kind != claimNew {
		t.Fatalf("the retry's claim: %+v, %v (want new)", c, err)
	}
	if ttl := srv.Client().PTTL(ctx, key).Val(); ttl <= 0 {
		t.Fatalf("the retry's record on the marker's key has PTTL %v", ttl)
	}
}

// orphanClaim sends a request while Redis sleeps longer than StoreTimeout,
// until one gets the store error (fail-closed) or runs unprotected
// (fail-open), and returns its key.
func orphanClaim(t *testing.T, e *env, srv *redistest.Server, policy ErrorPolicy) string {
	t.Helper()
	for attempt := 0; attempt < 5; attempt++ {
		key := "orphan-" + strconv.Itoa(attempt)
		landed := e.logs.FilterMessageSnippet("it was withdrawn").Len()
		slept := srv.Sleep(600 * time.Millisecond)
		r := e.post("/payments", key, `{}`)
		<-slept
		failed := r.status == 500
		if policy == FailOpen {
			failed = r.status == 201 && e.logs.FilterMessageSnippet("WITHOUT idempotency protection").Len() > 0
		}
		e.svc.late.running.Wait() // the withdrawal has landed (or given up)
		// On a loaded machine the claim may time out before it was even
		// sent (its connection still dialing): then nothing landed, and
		// the attempt proves nothing. Only a claim that reached Redis
		// and was withdrawn there is the orphan.
		if failed && e.logs.FilterMessageSnippet("it was withdrawn").Len() > landed {
			return key
		}
	}
	t.Fatal("no claim timed out after reaching Redis in 5 attempts")
	return ""
}

// Issue 14, suspected (proved): with a volatile-* maxmemory policy Redis
// may evict idempotency records, which all have a TTL. An in-progress record
// evicted (volatile-ttl evicts the nearest expiry first, and the lease's is
// nearer than a day) lets a duplicate run the handler while the first still
// runs. Start warns about such a policy.
func TestEviction_VolatilePolicy_DuplicateRunsAndStartWarns(t *testing.T) {
	t.Parallel()
	srv := redistest.StartPrivate(t, redistest.WithArgs("--maxmemory", "4mb", "--maxmemory-policy", "volatile-ttl"))
	e := newEnv(t, Config{WaitTimeout: 100 * time.Millisecond}, srv)
	if e.logs.FilterMessageSnippet("maxmemory-policy volatile-ttl").Len() == 0 {
		t.Error("Start did not warn about the eviction policy")
	}
	var executions atomic.Int64
	g := newGate(t)
	e.setHandler(func(w http.ResponseWriter, r *http.Request) {
		if executions.Add(1) == 1 {
			g.hold()
		}
		w.WriteHeader(201)
	})
	first := make(chan reply, 1)
	go func() { first <- e.post("/payments", "evicted", `{}`) }()
	g.waitEntered(t)
	ctx := context.Background()
	admin := srv.Client()
	filler := strings.Repeat("x", 16<<10)
	for i := 0; e.record("evicted") != nil; i++ {
		if i == 2000 {
			t.Fatal("the record survived 32 MiB of other keys")
		}
		admin.Set(ctx, "filler:"+strconv.Itoa(i), filler, time.Hour)
	}
	if r := e.post("/payments", "evicted", `{}`); r.status != 201 || r.header.Get(ReplayedHeader) == "true" {
		t.Fatalf("duplicate after eviction: %d %s", r.status, r.body)
	}
	g.open()
	<-first
	if n := executions.Load(); n != 2 {
		t.Fatalf("%d executions, want 2: the evicted record let the duplicate run", n)
	}
}
