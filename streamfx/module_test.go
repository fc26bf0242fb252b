package streamfx

import (
	"context"
	"strings"
	"testing"
	"time"

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

// handlerOnlyApp is the app of the package's "Getting started": storefx,
// streamfx and a handler contributed with AsHandler, nothing that asks for
// *Streams.
func handlerOnlyApp(srv *redistest.Server, cfg Config, stream string, h Handler) *fx.App {
	return fx.New(
		fx.NopLogger,
		fx.Supply(&storefx.Config{URL: srv.URL()}),
		storefx.Module,
		Module,
		fx.Supply(cfg),
		fx.Provide(AsHandler(func() StreamHandler { return StreamHandler{Stream: stream, Handler: h} })),
	)
}

// Found by an adversary: with no part of the app asking for *Streams, Fx
// never built it, so no consumer started and the handler never ran. The
// module now builds Streams itself.
func TestModule_HandlerAloneConsumes_WithoutAnythingAskingForStreams(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	stream := redistest.Prefix(t) + "orders"
	got := make(chan string, 1)
	app := handlerOnlyApp(srv, Config{Group: "billing"}, stream, func(_ context.Context, m Message) error {
		select {
		case got <- string(m.Data):
		default:
		}
		return nil
	})
	if err := app.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := app.Stop(context.Background()); err != nil {
			t.Error(err)
		}
	}()
	// A producer in another process publishes.
	if err := srv.Client().XAdd(context.Background(), &redis.XAddArgs{Stream: stream, Values: []any{FieldData, "hello"}}).Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-got:
		if m != "hello" {
			t.Fatalf("got %q", m)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the handler never ran: the consumers did not start with the app")
	}
}

// The same app with an invalid Config fails start-up naming the field
// (before, Streams was never built, so nothing checked it).
func TestModule_HandlerAlone_InvalidConfigFailsStartUp(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	app := handlerOnlyApp(srv, Config{MaxAttempts: -1}, redistest.Prefix(t)+"orders", func(context.Context, Message) error { return nil })
	err := app.Err()
	if err == nil {
		err = app.Start(context.Background())
		_ = app.Stop(context.Background())
	}
	if err == nil || !strings.Contains(err.Error(), "Config.MaxAttempts") {
		t.Fatalf("start-up with MaxAttempts -1 = %v; want an error naming Config.MaxAttempts", err)
	}
}

// What a handler's constructor uses starts before Streams and stops after
// it: a stop never leaves a running handler with a stopped dependency.
func TestModule_HandlerDependenciesOutliveStreams(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	var s *Streams
	var seen []bool // whether Streams ran when the dependency started, and when it stopped
	running := func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		seen = append(seen, s.running)
	}
	app := fx.New(fx.NopLogger, fx.Supply(&storefx.Config{URL: srv.URL()}), storefx.Module, Module,
		fx.Provide(AsHandler(func(lc fx.Lifecycle) StreamHandler {
			lc.Append(fx.StartStopHook(running, running))
			return StreamHandler{Stream: redistest.Prefix(t) + "deps", Handler: func(context.Context, Message) error { return nil }}
		})),
		fx.Populate(&s))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := app.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := app.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if len(seen) != 2 || seen[0] || seen[1] {
		t.Fatalf("Streams running at the dependency's start and stop: %v, want [false false]", seen)
	}
}
