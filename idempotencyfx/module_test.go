package idempotencyfx_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	"go.uber.org/zap"

	"github.com/redisfx/redisfx/httpfx"
	"github.com/redisfx/redisfx/idempotencyfx"
	"github.com/redisfx/redisfx/internal/redistest"
	"github.com/redisfx/redisfx/storefx"
)

func TestModule_DecoratedErrorFilterTakesEffect(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	var server *httpfx.Server
	app := fxtest.New(t,
		fx.NopLogger,
		fx.Provide(zap.NewNop),
		fx.Supply(&storefx.Config{URL: srv.URL()}),
		fx.Supply(&idempotencyfx.Config{KeyPrefix: redistest.Prefix(t), DefaultTTL: 60e9}),
		fx.Supply(&httpfx.Config{Addr: "127.0.0.1:0"}),
		storefx.Module, idempotencyfx.Module, httpfx.Module,
		fx.Provide(httpfx.AsRoutes(func() httpfx.Routes {
			return func(r chi.Router) {
				r.With(idempotencyfx.Idempotent()).Post("/pay", func(w http.ResponseWriter, r *http.Request) {
					_, _ = io.WriteString(w, r.URL.Query().Get("v"))
				})
			}
		})),
		fx.Decorate(func(next idempotencyfx.ErrorFilter) idempotencyfx.ErrorFilter {
			return func(err error, r *http.Request) (httpfx.Problem, bool) {
				p, ok := next(err, r)
				if ok && p.Code == idempotencyfx.CodeKeyReused {
					p.Status = http.StatusConflict
					p.Type = "https://example.com/problems/" + p.Code
				}
				return p, ok
			}
		}),
		fx.Populate(&server),
	)
	app.RequireStart()
	defer app.RequireStop()
	post := func(v string) *http.Response {
		req, _ := http.NewRequest(http.MethodPost, server.URL()+"/pay?v="+v, nil)
		req.Header.Set("Idempotency-Key", "k")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	post("1").Body.Close()
	resp := post("2")
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusConflict || !strings.Contains(string(body), "https://example.com/problems/idempotency_key_reused") {
		t.Fatalf("decoration ignored: %d %s", resp.StatusCode, body)
	}
}

func TestModule_MissingStoreSaysWhichModuleToAdd(t *testing.T) {
	t.Parallel()
	app := fx.New(fx.NopLogger, fx.Provide(zap.NewNop), idempotencyfx.Module,
		fx.Invoke(func(*idempotencyfx.Service) {}))
	want := "idempotencyfx.Module needs a Redis client: add storefx.Module to the app"
	if err := app.Err(); err == nil || !strings.HasSuffix(err.Error(), want) {
		t.Fatalf("err = %v\nwant one ending %q", err, want)
	}
}

func TestModule_MissingLoggerSaysWhatToProvide(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	app := fx.New(fx.NopLogger, storefx.Module, fx.Supply(storefx.Config{URL: srv.URL()}), idempotencyfx.Module,
		fx.Invoke(func(*idempotencyfx.Service) {}))
	want := "idempotencyfx.Module needs a *zap.Logger: provide one, e.g. fx.Provide(zap.NewProduction)"
	if err := app.Err(); err == nil || !strings.HasSuffix(err.Error(), want) {
		t.Fatalf("err = %v\nwant one ending %q", err, want)
	}
}

// A Config supplied by value is used, not silently replaced by the defaults.
func TestModule_ConfigByValue(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	var svc *idempotencyfx.Service
	app := fxtest.New(t, fx.NopLogger, fx.Provide(zap.NewNop), storefx.Module,
		fx.Supply(storefx.Config{URL: srv.URL()}),
		fx.Supply(idempotencyfx.Config{KeyPrefix: "by-value:", LockTimeout: 7 * time.Second}),
		idempotencyfx.Module, fx.Populate(&svc))
	app.RequireStart()
	defer app.RequireStop()
	if c := svc.Config(); c.KeyPrefix != "by-value:" || c.LockTimeout != 7*time.Second {
		t.Fatalf("effective config %+v: the supplied value was ignored", c)
	}
}

func TestModule_InvalidConfigFailsNamingTheOption(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	app := fx.New(fx.NopLogger, fx.Provide(zap.NewNop), storefx.Module,
		fx.Supply(&storefx.Config{URL: srv.URL()}),
		fx.Supply(&idempotencyfx.Config{ErrorPolicy: "sometimes"}),
		idempotencyfx.Module, fx.Invoke(func(*idempotencyfx.Service) {}))
	if err := app.Err(); err == nil || !strings.Contains(err.Error(), "ErrorPolicy") {
		t.Fatalf("err = %v", err)
	}
}
