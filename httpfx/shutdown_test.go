package httpfx_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/redis/go-redis/v9"
	"go.uber.org/fx"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/redisfx/redisfx/httpfx"
	"github.com/redisfx/redisfx/internal/redistest"
	"github.com/redisfx/redisfx/storefx"
	"github.com/redisfx/redisfx/tracingfx"
)

// Fx runs no stop hook once its stop context has ended. The drain used to
// take all of it (15 s each by default), so one request outliving the
// drain left the Redis client open and the spans of earlier requests
// unflushed (found by an adversary). The drain leaves a third of the stop
// time, at most 5 s, to the hooks after it, and says so.
func TestStop_SlowRequest_RedisClosedAndSpansFlushedWithinFxStopTimeout(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	var exports atomic.Int64
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/v1/traces") {
			exports.Add(1)
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer collector.Close()
	release, entered := make(chan struct{}), make(chan struct{})
	defer close(release)
	core, logs := observer.New(zap.WarnLevel)
	var rdb redis.UniversalClient
	var server *httpfx.Server
	app := fx.New(fx.NopLogger, fx.StopTimeout(3*time.Second),
		storefx.Module, tracingfx.Module, httpfx.Module,
		fx.Supply(zap.New(core)),
		fx.Supply(&storefx.Config{URL: srv.URL()}),
		fx.Supply(&httpfx.Config{Addr: "127.0.0.1:0"}), // ShutdownTimeout: the default, 10 s
		fx.Supply(&tracingfx.Config{ServiceName: "shutdown",
			Exporter: tracingfx.ExporterConfig{Type: tracingfx.ExporterOTLP, Endpoint: collector.URL},
			Batch:    tracingfx.BatchConfig{ScheduleDelay: time.Minute}}), // flushed at stop only
		fx.Provide(httpfx.AsRoutes(func() httpfx.Routes {
			return func(r chi.Router) {
				r.Get("/fast", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
				r.Get("/slow", func(w http.ResponseWriter, r *http.Request) {
					close(entered)
					select {
					case <-release:
					case <-time.After(30 * time.Second):
					}
				})
			}
		})),
		fx.Populate(&rdb, &server),
	)
	if err := app.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(server.URL() + "/fast")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	go func() {
		if resp, err := http.Get(server.URL() + "/slow"); err == nil {
			resp.Body.Close()
		}
	}()
	<-entered
	ctx, cancel := context.WithTimeout(context.Background(), app.StopTimeout()) // as fx.Run stops
	defer cancel()
	_ = app.Stop(ctx) // the drain's error: the slow request was cut off
	if err := rdb.Ping(context.Background()).Err(); !errors.Is(err, redis.ErrClosed) {
		t.Errorf("after the stop the Redis client is open (Ping: %v)", err)
	}
	if exports.Load() == 0 {
		t.Error("after the stop no span was exported: the /fast request's span was never flushed")
	}
	if logs.FilterMessageSnippet("draining for less than ShutdownTimeout").Len() != 1 {
		t.Errorf("no warning that the drain was cut: %v", logs.All())
	}
}
