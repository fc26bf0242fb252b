package idempotencyfx

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisfx/redisfx/internal/idemscript"
	"github.com/redisfx/redisfx/internal/redistest"
	"github.com/redisfx/redisfx/storefx"
)

// sentNonPing counts the commands that passed the breaker (a hook added
// after the breaker sits inside it), but for the
// breaker's probes (PING) and the background withdrawals of claims whose
// reply was lost (the first try of one goes through the breaker, which its
// own failure may have opened; see withdraw.go), which are not the request
// path under test.
type sentNonPing struct{ n atomic.Int64 }

func background(cmd redis.Cmder) bool {
	args := cmd.Args()
	if cmd.Name() == "ping" {
		return true
	}
	if len(args) < 2 {
		return false
	}
	script, _ := args[1].(string) // EVALSHA's hash, or EVAL's source after a NOSCRIPT
	return script == idemscript.Abandon.Hash() || strings.Contains(script, "'x:' .. ARGV[1], '1')")
}

func (c *sentNonPing) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *sentNonPing) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !background(cmd) {
			c.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (c *sentNonPing) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// Redis killed under each policy: once the client's circuit breaker is
// open, requests are answered by the policy without any command sent to
// Redis (fail-closed: 500 idempotency_store_unavailable with Retry-After,
// the handler not run; fail-open: the handler runs, counted fail_open);
// when Redis is back the breaker closes by itself and keys are protected
// again (a new key runs once and replays).
func TestStoreDown_BreakerOpen_PolicyAnswersWithoutRedis(t *testing.T) {
	t.Parallel()
	for _, policy := range []ErrorPolicy{FailClosed, FailOpen} {
		t.Run(string(policy), func(t *testing.T) {
			t.Parallel()
			srv := redistest.StartPrivate(t)
			e := newEnv(t, Config{ErrorPolicy: policy, StoreTimeout: 200 * time.Millisecond}, srv)
			client, ok := e.rdb.(*storefx.Client)
			if !ok {
				t.Fatalf("the env's client is a %T", e.rdb)
			}
			sent := &sentNonPing{}
			client.AddHook(sent)
			wantStatus(t, e.post("/payments", "before", `{"a":1}`), 201, "")

			srv.Kill()
			// The first failures wait for Redis (StoreTimeout, a refused dial);
			// then the breaker opens.
			deadline := time.Now().Add(10 * time.Second)
			for i := 0; client.Breaker().State == storefx.BreakerClosed; i++ {
				if time.Now().After(deadline) {
					t.Fatalf("breaker still closed after %d requests to a dead Redis: %+v", i, client.Breaker())
				}
				e.post("/payments", "warm-"+strconv.Itoa(i), `{"a":1}`)
			}

			calls, cmds := e.calls.Load(), sent.n.Load()
			const n = 50
			var slowest time.Duration
			for i := 0; i < n; i++ {
				began := time.Now()
				r := e.post("/payments", "down-"+strconv.Itoa(i), `{"a":1}`)
				slowest = max(slowest, time.Since(began))
				switch policy {
				case FailClosed:
					wantStatus(t, r, 500, CodeStoreUnavailable)
					if r.header.Get("Retry-After") != "1" {
						t.Fatalf("Retry-After = %q, want 1", r.header.Get("Retry-After"))
					}
				case FailOpen:
					wantStatus(t, r, 201, "")
				}
			}
			t.Logf("%d requests with the breaker open, slowest %v", n, slowest)
			if got := sent.n.Load() - cmds; got != 0 {
				t.Fatalf("%d commands sent to Redis while the breaker was open, want 0", got)
			}
			wantCalls := calls
			if policy == FailOpen {
				wantCalls += n
			}
			if got := e.calls.Load(); got != wantCalls {
				t.Fatalf("handler ran %d times, want %d", got, wantCalls)
			}
			if st := client.Breaker(); st.Refused < n {
				t.Fatalf("breaker refused %d commands, want at least %d", st.Refused, n)
			}

			srv.Start()
			deadline = time.Now().Add(10 * time.Second)
			for client.Breaker().State != storefx.BreakerClosed {
				if time.Now().After(deadline) {
					t.Fatalf("breaker not closed 10s after Redis came back: %+v", client.Breaker())
				}
				time.Sleep(10 * time.Millisecond)
			}
			calls = e.calls.Load()
			first := e.post("/payments", "after", `{"a":2}`)
			wantStatus(t, first, 201, "")
			again := e.post("/payments", "after", `{"a":2}`)
			if again.body != first.body || again.header.Get("Idempotent-Replayed") != "true" {
				t.Fatalf("retry after recovery: %d %s (replayed %q), want the replay of %s",
					again.status, again.body, again.header.Get("Idempotent-Replayed"), first.body)
			}
			if got := e.calls.Load() - calls; got != 1 {
				t.Fatalf("handler ran %d times for one key after recovery", got)
			}
		})
	}
}
