package ratelimitfx

import (
	"context"
	"testing"
	"time"

	"github.com/redisfx/redisfx/internal/redistest"
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
