package storefx_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"

	"github.com/redisfx/redisfx/internal/redistest"
	"github.com/redisfx/redisfx/storefx"
)

// A health check is stale after HealthCheckInterval + HealthCheckTimeout:
// with 200 and 100 years the sum overflowed into a negative duration, and
// a Redis that answered every PING was reported down from the start.
func TestHealthCheck_LongestDurations_ReportUp(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	const year = 365 * 24 * time.Hour
	var reg *storefx.Registry
	app := fxtest.New(t, storefx.Module,
		fx.Supply(&storefx.Config{URL: srv.URL(), HealthCheckInterval: 200 * year, HealthCheckTimeout: 1<<63 - 1}),
		fx.Invoke(func(redis.UniversalClient) {}), fx.Populate(&reg))
	app.RequireStart()
	defer app.RequireStop()
	if err := reg.Ready(context.Background()); err != nil {
		t.Fatalf("health checks of 200 and 292 years, Redis up: %v", err)
	}

	c, err := storefx.New("watched", storefx.Config{URL: srv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	watched := storefx.NewRegistry()
	if err := watched.Add(c); err != nil {
		t.Fatal(err)
	}
	stop, err := watched.Watch("watched", 200*year, 100*year)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if h := watched.Health("watched"); !h.Up {
		t.Fatalf("Watch with 200 and 100 years, Redis up: %v", h.Err)
	}
}

// go-redis waits for a pooled connection ReadTimeout + 1s: a ReadTimeout of
// 292 years overflowed it into a negative wait, and a command finding the
// only connection busy failed at once with "connection pool timeout"
// instead of waiting for it. storefx saturates the sum.
func TestReadTimeout_Longest_PoolWaitsForAConnection(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c, err := storefx.New("default", storefx.Config{URL: srv.URL(), PoolSize: 1, ReadTimeout: 1<<63 - 1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	busy := make(chan error, 1)
	go func() { busy <- c.BLPop(ctx, time.Second, redistest.Prefix(t)+"l").Err() }()
	time.Sleep(100 * time.Millisecond) // the BLPOP holds the only connection
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING while the only connection is busy: %v, want it to wait for it", err)
	}
	if err := <-busy; !errors.Is(err, redis.Nil) {
		t.Fatalf("BLPOP: %v", err)
	}
}
