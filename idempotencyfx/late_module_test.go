package idempotencyfx_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/fx"
	"go.uber.org/zap"

	"github.com/redisfx/redisfx/idempotencyfx"
	"github.com/redisfx/redisfx/internal/faultproxy"
	"github.com/redisfx/redisfx/internal/redistest"
	"github.com/redisfx/redisfx/storefx"
)

// At stop, outcomes still being recorded in the background (Redis out of
// reach) get a bounded grace, never the whole stop deadline: the hooks that
// stop after idempotencyfx's (storefx, tracingfx's final flush) keep at
// least half of it.
func TestModule_StopGivesLateOutcomesABoundedGrace(t *testing.T) {
	t.Parallel()
	srv := redistest.StartPrivate(t)
	proxy := faultproxy.Start(t, srv.Addr())
	var left time.Duration // what the hook stopping after idempotencyfx's was left
	var svc *idempotencyfx.Service
	var client *storefx.Client
	app := fx.New(fx.NopLogger,
		fx.Provide(zap.NewNop),
		fx.Supply(&storefx.Config{URL: "redis://" + proxy.Addr(), DialTimeout: 200 * time.Millisecond}),
		fx.Supply(&idempotencyfx.Config{KeyPrefix: redistest.Prefix(t), StoreTimeout: time.Second}),
		storefx.Module, idempotencyfx.Module,
		fx.Invoke(func(lc fx.Lifecycle) { // appended first, so it stops last
			lc.Append(fx.Hook{OnStop: func(ctx context.Context) error {
				deadline, _ := ctx.Deadline()
				left = time.Until(deadline)
				return nil
			}})
		}),
		fx.Populate(&svc, &client),
	)
	if err := app.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	out, replayed, err := svc.Do(context.Background(), "k", "fp", func(context.Context) ([]byte, error) {
		proxy.SetMode(faultproxy.Blackhole) // Redis out of reach as the work returns
		return []byte("charged"), nil
	})
	if err != nil || replayed || string(out) != "charged" {
		t.Fatalf("Do = %q, %v, %v", out, replayed, err)
	}
	// A late try is in flight when the grace ends, and go-redis lets it
	// run to its StoreTimeout (1s): the hook must not wait for it.
	const budget = time.Second
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	if err := app.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	// Grace min(2×StoreTimeout, half the deadline) = 500ms of the 1s.
	if left < budget/2-100*time.Millisecond {
		t.Fatalf("the hook stopping after idempotencyfx's was left %v of %v", left, budget)
	}
	if err := client.Ping(context.Background()).Err(); err == nil || err.Error() != "redis: client is closed" {
		t.Fatalf("storefx's stop hook did not close the client (PING: %v)", err)
	}
}
