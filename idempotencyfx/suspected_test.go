package idempotencyfx

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redisfx/redisfx/internal/redistest"
)

// Issue 14, suspected (proved): a claim whose reply is lost to StoreTimeout
// still lands when Redis was only slow (DEBUG SLEEP: the command waits in
// the socket and runs after the sleep). The key is then in progress with no
// living owner: the request got 500 (fail-closed), retries get 409 until the
// lease runs out (LockTimeout), then exactly one retry takes over and runs
// the handler, with fencing token 2. Under fail-open the first request ran
// the handler unprotected, so the takeover runs it a second time: the same
// double execution as any fail-open request retried after an outage (see
// docs/operations.md).
func TestClaimReplyLost_OrphanUntilLeaseEnds_ThenOneTakeover(t *testing.T) {
	t.Parallel()
	for _, policy := range []ErrorPolicy{FailClosed, FailOpen} {
		t.Run(string(policy), func(t *testing.T) {
			t.Parallel()
			srv := redistest.StartPrivate(t)
			lock := time.Second
			e := newEnv(t, Config{ErrorPolicy: policy, StoreTimeout: 200 * time.Millisecond, LockTimeout: lock, NoWait: true}, srv)
			// Per key: an attempt of orphanClaim whose claim beat the sleep
			// runs its own key's handler, which is not under test.
			var mu sync.Mutex
			tokens := map[string][]int64{}
			e.setHandler(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				key := r.Header.Get("Idempotency-Key")
				tokens[key] = append(tokens[key], FencingToken(r.Context()))
				mu.Unlock()
				w.WriteHeader(201)
			})
			key := orphanClaim(t, e, srv, policy)
			orphan := e.record(key)
			if orphan == nil || orphan.State != StateInProgress || orphan.FencingToken <= 0 {
				t.Fatalf("after the lost reply the record is %+v, want in progress (the claim landed)", orphan)
			}
			wantStatus(t, e.post("/payments", key, `{}`), 409, CodeInProgress)
			// The lease (LockTimeout from the claim) is the duration under test.
			time.Sleep(lock)
			if r := e.post("/payments", key, `{}`); r.status != 201 {
				t.Fatalf("retry after the lease: %d %s", r.status, r.body)
			}
			want := int64(1)
			if policy == FailOpen {
				want = 2 // the unprotected run, then the takeover
			}
			mu.Lock()
			defer mu.Unlock()
			if n := int64(len(tokens[key])); n != want {
				t.Fatalf("%d executions of %s, want %d (tokens %v)", n, key, want, tokens[key])
			}
			if last := tokens[key][len(tokens[key])-1]; last <= orphan.FencingToken {
				t.Fatalf("the takeover ran with fencing token %d, want above the orphan claim's %d", last, orphan.FencingToken)
			}
		})
	}
}

// orphanClaim sends a request while Redis sleeps longer than StoreTimeout,
// until one gets the store error (fail-closed) or runs unprotected
// (fail-open), and returns its key.
func orphanClaim(t *testing.T, e *env, srv *redistest.Server, policy ErrorPolicy) string {
	t.Helper()
	admin := srv.Client()
	for attempt := 0; attempt < 5; attempt++ {
		key := "orphan-" + strconv.Itoa(attempt)
		slept := make(chan struct{})
		go func() {
			defer close(slept)
			_ = admin.Do(context.Background(), "DEBUG", "SLEEP", "0.6").Err()
		}()
		time.Sleep(50 * time.Millisecond) // let DEBUG SLEEP reach Redis before the claim
		r := e.post("/payments", key, `{}`)
		<-slept
		failed := r.status == 500
		if policy == FailOpen {
			failed = r.status == 201 && e.logs.FilterMessageSnippet("WITHOUT idempotency protection").Len() > 0
		}
		if failed {
			return key
		}
	}
	t.Fatal("no claim timed out in 5 attempts")
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
