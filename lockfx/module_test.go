package lockfx

import (
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/fx"

	"github.com/redisfx/redisfx/internal/redistest"
	"github.com/redisfx/redisfx/storefx"
)

// An invalid Config fails fx.New with the field's name; a missing Redis
// client is named too.
func TestModule_InvalidConfigAndMissingStore(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	app := fx.New(fx.NopLogger,
		fx.Supply(&storefx.Config{URL: srv.URL()}, &Config{TTL: time.Millisecond}),
		storefx.Module, Module, fx.Invoke(func(*Locker) {}))
	if err := app.Err(); err == nil || !strings.Contains(err.Error(), "Config.TTL") {
		t.Fatalf("fx.New = %v", err)
	}
	app = fx.New(fx.NopLogger, Module, fx.Invoke(func(*Locker) {}))
	if err := app.Err(); err == nil || !strings.Contains(err.Error(), "storefx.Module") {
		t.Fatalf("fx.New without a store = %v", err)
	}
}

// The Config may be supplied by value or by pointer, not both; a go-redis
// client that ignores context deadlines is refused, saying how to fix it.
func TestModule_ConfigByValueAndClientChecks(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	var got *Locker
	app := fx.New(fx.NopLogger, fx.Supply(&storefx.Config{URL: srv.URL()}, Config{KeyPrefix: "by-value:"}),
		storefx.Module, Module, fx.Populate(&got))
	if err := app.Err(); err != nil {
		t.Fatal(err)
	}
	if got.cfg.KeyPrefix != "by-value:" {
		t.Errorf("KeyPrefix %q: the Config value was not used", got.cfg.KeyPrefix)
	}
	app = fx.New(fx.NopLogger, fx.Supply(&storefx.Config{URL: srv.URL()}, Config{KeyPrefix: "a:"}, &Config{KeyPrefix: "b:"}),
		storefx.Module, Module, fx.Invoke(func(*Locker) {}))
	if err := app.Err(); err == nil || !strings.Contains(err.Error(), "lockfx: both a lockfx.Config and a *lockfx.Config") {
		t.Errorf("fx.New with both = %v", err)
	}
	plain := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = plain.Close() })
	app = fx.New(fx.NopLogger, fx.Provide(func() redis.UniversalClient { return plain }), Module, fx.Invoke(func(*Locker) {}))
	if err := app.Err(); err == nil || !strings.Contains(err.Error(), "lockfx: the *redis.Client ignores context deadlines") ||
		!strings.Contains(err.Error(), "ContextTimeoutEnabled: true") {
		t.Errorf("fx.New with a plain go-redis client = %v", err)
	}
}
