package lockfx

import (
	"strings"
	"testing"

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
		fx.Supply(&storefx.Config{URL: srv.URL()}, &Config{Attempts: -3}),
		storefx.Module, Module, fx.Invoke(func(*Locker) {}))
	if err := app.Err(); err == nil || !strings.Contains(err.Error(), "Config.Attempts") {
		t.Fatalf("fx.New = %v", err)
	}
	app = fx.New(fx.NopLogger, Module, fx.Invoke(func(*Locker) {}))
	if err := app.Err(); err == nil || !strings.Contains(err.Error(), "storefx.Module") {
		t.Fatalf("fx.New without a store = %v", err)
	}
}
