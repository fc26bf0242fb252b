package storefx_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisfx/redisfx/internal/redistest"
	"github.com/redisfx/redisfx/storefx"
)

// Commands that tell nothing of Redis never open the breaker of a server
// that answers: contexts spent or cancelled before the command, cancelled
// while it waits, and deadlines shorter than ProbeTimeout that end a
// command Redis is still serving (a BLPOP). Before, every one but the
// cancelled counted as a failure.
func TestBreaker_CallersEndedContexts_NeverOpen(t *testing.T) {
	t.Parallel()
	srv := redistest.StartPrivate(t)
	c, _ := newBreakerClient(t, srv.Addr(), storefx.BreakerConfig{Failures: 1, ProbeTimeout: 2 * time.Second})
	spent, cancelSpent := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancelSpent()
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for i := 0; i < 10; i++ {
		if err := c.Get(spent, "k").Err(); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("GET with a spent deadline: %v", err)
		}
		if err := c.Get(cancelled, "k").Err(); !errors.Is(err, context.Canceled) {
			t.Fatalf("GET with a cancelled context: %v", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		err := c.BLPop(ctx, time.Second, "empty-list").Err()
		cancel()
		if err == nil || errors.Is(err, storefx.ErrCircuitOpen) {
			t.Fatalf("BLPOP cut short by its deadline: %v", err)
		}
	}
	var wg sync.WaitGroup
	for i := 0; i < 5; i++ {
		ctx, cancel := context.WithCancel(context.Background())
		wg.Go(func() { _ = c.BLPop(ctx, 200*time.Millisecond, "empty-list").Err() })
		time.AfterFunc(20*time.Millisecond, cancel)
	}
	wg.Wait()
	if st := c.Breaker(); st.Opened != 0 || st.Refused != 0 {
		t.Fatalf("the breaker of a Redis that answers: %+v, want never opened", st)
	}
	if err := get(c, "k", time.Second); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET: %v", err)
	}
}

// Only an answer of Redis closes the breaker through BypassBreaker: a
// bypassing command whose context is cancelled, or whose deadline ends,
// leaves open the breaker of a dead Redis. Before, a cancelled one closed
// it, and the next command went to the dead server.
func TestBreaker_BypassWithoutAnswer_DoesNotClose(t *testing.T) {
	t.Parallel()
	srv := redistest.StartPrivate(t)
	c, _ := newBreakerClient(t, srv.Addr(), storefx.BreakerConfig{Failures: 1, ProbeInterval: time.Hour, ProbeTimeout: 100 * time.Millisecond})
	if err := get(c, "k", time.Second); !errors.Is(err, redis.Nil) {
		t.Fatal(err)
	}
	srv.Kill()
	for i := 0; c.Breaker().State == storefx.BreakerClosed; i++ {
		if i == 3 {
			t.Fatalf("the breaker did not open: %+v", c.Breaker())
		}
		_ = get(c, "k", time.Second)
	}
	waitState(t, c, storefx.BreakerOpen, 5*time.Second) // its first probe failed
	cancelled, cancel := context.WithCancel(storefx.BypassBreaker(context.Background()))
	cancel()
	if err := c.Get(cancelled, "k").Err(); !errors.Is(err, context.Canceled) {
		t.Fatalf("bypassing GET with a cancelled context: %v", err)
	}
	ctx, cancel := context.WithTimeout(storefx.BypassBreaker(context.Background()), 50*time.Millisecond)
	_ = c.Get(ctx, "k").Err()
	cancel()
	if st := c.Breaker(); st.State != storefx.BreakerOpen {
		t.Fatalf("after bypassing commands Redis never answered: %+v, want open", st)
	}
	if err := get(c, "k", time.Second); !errors.Is(err, storefx.ErrCircuitOpen) {
		t.Fatalf("GET to a dead Redis: %v, want ErrCircuitOpen", err)
	}
	// An answer, an error reply included, closes it.
	srv.Start()
	if err := c.Get(storefx.BypassBreaker(context.Background()), "k").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("bypassing GET once Redis is back: %v", err)
	}
	if st := c.Breaker(); st.State != storefx.BreakerClosed {
		t.Fatalf("after Redis answered: %+v, want closed", st)
	}
}

// A Cluster command whose try was sent, timed out (ReadTimeout) and was
// retried by go-redis into the node's breaker that opened meanwhile may
// still run when the node wakes: its error must not be ErrCircuitOpen,
// which says it was never sent. Before, it was, and callers that take
// ErrCircuitOpen for "not sent" (idempotencyfx's withdrawal, lockfx's
// give-back) left what it did in place.
func TestBreaker_Cluster_RetryRefusedAfterASend_IsNotErrCircuitOpen(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-master cluster")
	}
	t.Parallel()
	cl := redistest.StartCluster(t, 3, 0)
	c, err := storefx.New("default", storefx.Config{Addrs: cl.Addrs(), ReadTimeout: 200 * time.Millisecond,
		Breaker: storefx.BreakerConfig{Failures: 3, ProbeInterval: time.Hour, ProbeTimeout: 100 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	victim := cl.Nodes[0]
	tag := ""
	for i := 0; tag == ""; i++ {
		if k := "{t" + strconv.Itoa(i) + "}"; cl.MasterOf(k) == victim {
			tag = k
		}
	}
	ctx := context.Background()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Set(ctx, tag+"warm", "v", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	woke := victim.Sleep(2 * time.Second)
	const n = 8
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			errs[i] = c.Incr(ctx, tag+strconv.Itoa(i)).Err()
		})
	}
	wg.Wait()
	never := c.Incr(ctx, tag+"never").Err() // the breaker is open: refused before any send
	<-woke
	admin := victim.Client()
	refusedAfterSend := 0
	for i, err := range append(errs, never) {
		key := tag + strconv.Itoa(i)
		if i == n {
			key = tag + "never"
		}
		ran, xerr := admin.Exists(ctx, key).Result()
		if xerr != nil {
			t.Fatal(xerr)
		}
		switch {
		case errors.Is(err, storefx.ErrCircuitOpen) && ran != 0:
			t.Errorf("%s: ErrCircuitOpen, yet Redis ran it", key)
		case i == n && !errors.Is(err, storefx.ErrCircuitOpen):
			t.Errorf("a command sent while the breaker is open: %v, want ErrCircuitOpen", err)
		case err != nil && !errors.Is(err, storefx.ErrCircuitOpen) && strings.Contains(err.Error(), "circuit open"):
			refusedAfterSend++
		}
		t.Logf("%s: ran %d, %v", key, ran, err)
	}
	if refusedAfterSend == 0 {
		t.Fatalf("no retry was refused after a send: the case is not tested (%+v)", c.Breaker())
	}
}
