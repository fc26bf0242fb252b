package main

import (
	"strings"
	"testing"

	"go.uber.org/fx"
	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/redisfx/redisfx/httpfx"
	"github.com/redisfx/redisfx/idempotencyfx"
	"github.com/redisfx/redisfx/tracingfx"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The minimal app's graph is complete: fx.New validates every dependency.
func TestOptionsBuild(t *testing.T) {
	t.Setenv("REDIS_URL", "redis://127.0.0.1:1")
	app := fx.New(Options(), fx.NopLogger, fx.Invoke(func(*httpfx.Server, *idempotencyfx.Service) {}))
	if err := app.Err(); err != nil {
		t.Fatal(err)
	}
}

// Forgetting a module yields an error that says which one to add.
func TestMissingModuleIsNamed(t *testing.T) {
	app := fx.New(idempotencyfx.Module, tracingfx.Module, fx.Provide(zap.NewNop), fx.NopLogger,
		fx.Invoke(func(*idempotencyfx.Service) {}))
	if err := app.Err(); err == nil || !strings.Contains(err.Error(), "storefx.Module") {
		t.Fatalf("err = %v", err)
	}
}
