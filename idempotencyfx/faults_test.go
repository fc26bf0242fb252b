package idempotencyfx

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redisfx/redisfx/internal/redistest"
	"github.com/redisfx/redisfx/storefx"
)

// Faults during load, with each error policy: Redis killed and brought back
// empty (script cache gone), paused (CLIENT PAUSE), slowed (DEBUG SLEEP).
// Under fail-closed no handler ever runs without a claim (its fencing token
// is at least 1); nothing hangs past the timeouts; the service recovers by
// itself; every key has an expiry afterwards.
func TestFaults_DuringLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("fault injection under load")
	}
	faults := map[string]func(context.Context, *redistest.Server){
		"kill-restart": func(_ context.Context, s *redistest.Server) {
			s.Kill()
			time.Sleep(400 * time.Millisecond)
			s.Restart()
		},
		"pause": func(ctx context.Context, s *redistest.Server) { s.Pause(ctx, 600*time.Millisecond) },
		"slow":  func(ctx context.Context, s *redistest.Server) { _ = s.Client().Do(ctx, "DEBUG", "SLEEP", "0.6").Err() },
	}
	for name, fault := range faults {
		for _, policy := range []ErrorPolicy{FailClosed, FailOpen} {
			t.Run(name+"/"+string(policy), func(t *testing.T) {
				t.Parallel()
				srv := redistest.StartPrivate(t)
				storeTimeout := 250 * time.Millisecond
				e := newEnv(t, Config{ErrorPolicy: policy, StoreTimeout: storeTimeout, LockTimeout: time.Second}, srv)
				var unprotected, executions atomic.Int64
				e.setHandler(func(w http.ResponseWriter, r *http.Request) {
					executions.Add(1)
					if FencingToken(r.Context()) == 0 {
						unprotected.Add(1)
					}
					w.WriteHeader(201)
				})
				ctx, cancel := context.WithCancel(context.Background())
				var wg sync.WaitGroup
				var maxLatency atomic.Int64
				var seq atomic.Int64
				statuses := sync.Map{}
				for c := 0; c < 8; c++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for ctx.Err() == nil {
							began := time.Now()
							r := e.post("/payments", "k"+strconv.FormatInt(seq.Add(1), 10), `{}`)
							if d := int64(time.Since(began)); d > maxLatency.Load() {
								maxLatency.Store(d)
							}
							n, _ := statuses.LoadOrStore(r.status, new(atomic.Int64))
							n.(*atomic.Int64).Add(1)
						}
					}()
				}
				time.Sleep(200 * time.Millisecond)
				fault(context.Background(), srv)
				// Recovery: requests succeed again by themselves, and the
				// client's circuit breaker has closed (under fail-open a 201
				// alone proves nothing).
				deadline := time.Now().Add(10 * time.Second)
				for e.post("/payments", "probe-"+strconv.FormatInt(seq.Add(1), 10), `{}`).status != 201 || breakerOpen(e) {
					if time.Now().After(deadline) {
						t.Fatal("no recovery within 10s after the fault")
					}
					time.Sleep(20 * time.Millisecond)
				}
				time.Sleep(200 * time.Millisecond)
				cancel()
				wg.Wait()

				if policy == FailClosed && unprotected.Load() > 0 {
					t.Fatalf("%d handler runs without a claim under fail-closed", unprotected.Load())
				}
				// A request waits at most: claim (StoreTimeout) + handler + completion (2 tries × StoreTimeout),
				// plus a 600ms pause or sleep that blocks an in-flight call.
				if bound := 3*storeTimeout + 2*time.Second; time.Duration(maxLatency.Load()) > bound {
					t.Fatalf("a request took %v, bound %v", time.Duration(maxLatency.Load()), bound)
				}
				counts := map[int]int64{}
				statuses.Range(func(k, v any) bool { counts[k.(int)] = v.(*atomic.Int64).Load(); return true })
				t.Logf("%s/%s: %d executions, %d unprotected, statuses %v, max latency %v", name, policy,
					executions.Load(), unprotected.Load(), counts, time.Duration(maxLatency.Load()).Round(time.Millisecond))
				assertAllKeysExpire(t, e)
			})
		}
	}
}

// breakerOpen reports whether the env's client refuses commands.
func breakerOpen(e *env) bool {
	c, ok := e.rdb.(*storefx.Client)
	return ok && c.Breaker().State != storefx.BreakerClosed
}

func assertAllKeysExpire(t *testing.T, e *env) {
	t.Helper()
	ctx := context.Background()
	// The server's own client when there is one: the app's storefx client
	// may have its breaker open again for a moment after the fault (a
	// starved process's timeouts), which is not what this checks.
	rdb := e.rdb
	if e.srv != nil {
		rdb = e.srv.Client()
	}
	iter := rdb.Scan(ctx, 0, e.svc.cfg.KeyPrefix+"*", 1000).Iterator()
	n := 0
	for iter.Next(ctx) {
		n++
		if ttl := rdb.PTTL(ctx, iter.Val()).Val(); ttl <= 0 {
			t.Fatalf("%s has no expiry (%v)", iter.Val(), ttl)
		}
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal("no records: the load did not reach Redis")
	}
}
