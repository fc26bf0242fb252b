package ratelimitfx

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redisfx/redisfx/internal/redistest"
	"github.com/redisfx/redisfx/storefx"
)

// Through a restart that empties Redis (and its script cache): fail-open
// while it is down, exact again once it is back.
func TestRedisRestart_FailOpenThenExactAgain(t *testing.T) {
	t.Parallel()
	srv := redistest.StartPrivate(t)
	l := newLimiter(t, srv, Config{Limit: 2, Window: time.Minute, StoreTimeout: 200 * time.Millisecond})
	ctx := context.Background()
	srv.Kill()
	if d, err := l.Check(ctx, Rule{}, "k"); err == nil || !d.Allowed {
		t.Fatalf("Redis down: %+v %v, want allowed with an error (fail-open)", d, err)
	}
	srv.Start()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := l.Check(ctx, Rule{Name: "probe"}, "k"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("checks never worked again")
		}
		time.Sleep(50 * time.Millisecond)
	}
	for i, want := range []bool{true, true, false} {
		if d, err := l.Check(ctx, Rule{}, "k"); err != nil || d.Allowed != want {
			t.Fatalf("check %d after the restart: %+v %v", i+1, d, err)
		}
	}
}

// With Redis down, the storefx client's circuit breaker opens after the
// first failures; then every check is answered at once by the policy, with
// storefx.ErrCircuitOpen as its error, and sends nothing to Redis.
func TestRedisDown_BreakerOpen_PolicyAnswersAtOnce(t *testing.T) {
	t.Parallel()
	for _, policy := range []ErrorPolicy{FailOpen, FailClosed} {
		t.Run(string(policy), func(t *testing.T) {
			t.Parallel()
			srv := redistest.StartPrivate(t)
			c, err := storefx.New("default", storefx.Config{URL: srv.URL(), DialTimeout: 200 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close() })
			l, err := New(c, Config{Limit: 2, Window: time.Minute, StoreTimeout: 200 * time.Millisecond, KeyPrefix: redistest.Prefix(t), ErrorPolicy: policy})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			srv.Kill()
			for i := 0; c.Breaker().Opened == 0; i++ {
				if i > 50 {
					t.Fatalf("breaker still closed after %d failed checks: %+v", i, c.Breaker())
				}
				_, _ = l.Check(ctx, Rule{}, "k")
			}
			refused := c.Breaker().Refused
			for i := 0; i < 50; i++ {
				d, err := l.Check(ctx, Rule{}, "k")
				if !errors.Is(err, storefx.ErrCircuitOpen) || d.Allowed != (policy == FailOpen) {
					t.Fatalf("check %d with the breaker open: %+v %v", i, d, err)
				}
			}
			if n := c.Breaker().Refused - refused; n < 50 {
				t.Fatalf("%d commands refused by the breaker for 50 checks", n)
			}
		})
	}
}
