package ratelimitfx

import (
	"strings"
	"testing"

	"go.uber.org/fx"

	"github.com/redisfx/redisfx/internal/redistest"
	"github.com/redisfx/redisfx/storefx"
)

// An invalid Config fails fx.New with the field's name.
func TestModule_InvalidConfigFailsStartNamingTheField(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	app := fx.New(fx.NopLogger,
		fx.Supply(&storefx.Config{URL: srv.URL()}, &Config{ErrorPolicy: "fail-sideways"}),
		storefx.Module, Module, fx.Invoke(func(*Limiter) {}))
	if err := app.Err(); err == nil || !strings.Contains(err.Error(), "Config.ErrorPolicy") {
		t.Fatalf("fx.New = %v", err)
	}
}
