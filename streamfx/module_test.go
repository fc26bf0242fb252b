package streamfx

import (
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"go.uber.org/fx"

	"github.com/redisfx/redisfx/internal/redistest"
	"github.com/redisfx/redisfx/storefx"
)

// The Config may be supplied by value or by pointer, not both; a go-redis
// client that ignores context deadlines is refused, saying how to fix it;
// a missing client is named.
func TestModule_ConfigByValueAndClientChecks(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	var got *Streams
	app := fx.New(fx.NopLogger, fx.Supply(&storefx.Config{URL: srv.URL()}, Config{Group: "by-value"}),
		storefx.Module, Module, fx.Populate(&got))
	if err := app.Err(); err != nil {
		t.Fatal(err)
	}
	if got.cfg.Group != "by-value" {
		t.Errorf("Group %q: the Config value was not used", got.cfg.Group)
	}
	app = fx.New(fx.NopLogger, fx.Supply(&storefx.Config{URL: srv.URL()}, Config{Group: "a"}, &Config{Group: "b"}),
		storefx.Module, Module, fx.Invoke(func(*Streams) {}))
	if err := app.Err(); err == nil || !strings.Contains(err.Error(), "streamfx: both a streamfx.Config and a *streamfx.Config") {
		t.Errorf("fx.New with both = %v", err)
	}
	plain := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = plain.Close() })
	app = fx.New(fx.NopLogger, fx.Provide(func() redis.UniversalClient { return plain }), Module, fx.Invoke(func(*Streams) {}))
	if err := app.Err(); err == nil || !strings.Contains(err.Error(), "streamfx: the *redis.Client ignores context deadlines") ||
		!strings.Contains(err.Error(), "ContextTimeoutEnabled: true") {
		t.Errorf("fx.New with a plain go-redis client = %v", err)
	}
	app = fx.New(fx.NopLogger, Module, fx.Invoke(func(*Streams) {}))
	if err := app.Err(); err == nil || !strings.Contains(err.Error(), "storefx.Module") {
		t.Errorf("fx.New without a store = %v", err)
	}
}
