package cachefx

import (
	"strings"
	"testing"
	"time"

	"go.uber.org/fx"

	"github.com/redisfx/redisfx/internal/redistest"
	"github.com/redisfx/redisfx/storefx"
)

// An invalid Config fails fx.New with the field's name.
func TestModule_InvalidConfigFailsStartNamingTheField(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	app := fx.New(fx.NopLogger,
		fx.Supply(&storefx.Config{URL: srv.URL()}, &Config{Local: LocalConfig{MaxEntries: 10, TTL: -time.Second}}),
		storefx.Module, Module, fx.Invoke(func(*Cache) {}))
	if err := app.Err(); err == nil || !strings.Contains(err.Error(), "Config.Local.TTL") {
		t.Fatalf("fx.New = %v", err)
	}
}
