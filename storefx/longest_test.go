package storefx_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"

	"github.com/redisfx/redisfx"
	"github.com/redisfx/redisfx/internal/fxconfig"
	"github.com/redisfx/redisfx/internal/fxconfig/fxconfigtest"
	"github.com/redisfx/redisfx/internal/redistest"
	"github.com/redisfx/redisfx/storefx"
)

// A health check is stale after HealthCheckInterval + HealthCheckTimeout:
// with 200 and 100 years the sum overflowed into a negative duration, and
// a Redis that answered every PING was reported down ("the health check
// has not finished in time") from the start. Such a Config is refused,
// naming the field; at the longest taken the client is up, and Watch,
// which takes any durations, no longer adds them.
func TestHealthCheck_LongestDurations_ReportUp(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	const year = 365 * 24 * time.Hour
	var ce *redisfx.ConfigError
	if err := (storefx.Config{HealthCheckInterval: 200 * year}).Validate(); !errors.As(err, &ce) || ce.Field != "Config.HealthCheckInterval" {
		t.Fatalf("HealthCheckInterval of 200 years: %v, want a ConfigError naming it", err)
	}
	var reg *storefx.Registry
	app := fxtest.New(t, storefx.Module,
		fx.Supply(&storefx.Config{URL: srv.URL(), HealthCheckInterval: fxconfig.MaxDuration, HealthCheckTimeout: fxconfig.MaxDuration}),
		fx.Invoke(func(redis.UniversalClient) {}), fx.Populate(&reg))
	app.RequireStart()
	defer app.RequireStop()
	if err := reg.Ready(context.Background()); err != nil {
		t.Fatalf("health checks of 100 years, Redis up: %v", err)
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
// instead of waiting for it. At the longest ReadTimeout taken it waits.
func TestReadTimeout_Longest_PoolWaitsForAConnection(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	var ce *redisfx.ConfigError
	if err := (storefx.Config{ReadTimeout: 1<<63 - 1}).Validate(); !errors.As(err, &ce) || ce.Field != "Config.ReadTimeout" {
		t.Fatalf("ReadTimeout of 292 years: %v, want a ConfigError naming it", err)
	}
	c, err := storefx.New("default", storefx.Config{URL: srv.URL(), PoolSize: 1, ReadTimeout: fxconfig.MaxDuration})
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

// Every duration is at most fxconfig.MaxDuration.
func TestConfig_DurationsAboveTheLongestNameTheOption(t *testing.T) {
	const tooLong = fxconfig.MaxDuration + time.Nanosecond
	m := fxconfig.MaxDuration
	longest := storefx.Config{DialTimeout: m, ReadTimeout: m, WriteTimeout: m, ClusterStateReloadInterval: m, ConnectTimeout: m,
		HealthCheckInterval: m, HealthCheckTimeout: m, Breaker: storefx.BreakerConfig{ProbeInterval: m, ProbeTimeout: m}}
	fxconfigtest.ExpectDurationBound(t, storefx.Config.Validate, map[string]storefx.Config{
		"DialTimeout":                {DialTimeout: tooLong},
		"ReadTimeout":                {ReadTimeout: tooLong},
		"WriteTimeout":               {WriteTimeout: tooLong},
		"ClusterStateReloadInterval": {ClusterStateReloadInterval: tooLong},
		"ConnectTimeout":             {ConnectTimeout: tooLong},
		"HealthCheckInterval":        {HealthCheckInterval: tooLong},
		"HealthCheckTimeout":         {HealthCheckTimeout: tooLong},
		"Breaker.ProbeInterval":      {Breaker: storefx.BreakerConfig{ProbeInterval: tooLong}},
		"Breaker.ProbeTimeout":       {Breaker: storefx.BreakerConfig{ProbeTimeout: tooLong}},
	}, longest)
}
