// Command benchserver serves the trivial payments handler in one of these
// modes, so that redisfx is measured against the limits of its design:
//
//	plain    chi and the handler, no idempotency at all
//	limit    chi, the handler, and exactly the store round trips of the
//	         design (claim + complete for a new key, claim for a replay,
//	         none without a key) with the same scripts, nothing else
//	redisfx  stripped: storefx, idempotencyfx, metricsfx and httpfx
//	         (router, request id, metrics, recovery) with a no-op logger
//	         and without tracingfx
//	stack    what the README wires: zap.NewProduction (the access log
//	         at info), tracingfx (its exporter and sampler from the
//	         OTEL_* environment; without any, the default: request spans
//	         made, nothing exported), storefx, metricsfx, httpfx,
//	         idempotencyfx and one route
//	stack-notracing  the same without tracingfx
//	nethttp  net/http's ServeMux, the handler and the limit's round trips
//	sdk-floor  nethttp traced with the bare OpenTelemetry SDK at 10 %
//	         (floor.go): the floor under tracingfx's cost
//
// -policy sets idempotencyfx's ErrorPolicy and -breaker=false turns off
// storefx's circuit breaker (the Redis-down measurements).
//
//	benchserver -mode limit -addr 127.0.0.1:9000 -redis redis://127.0.0.1:6379
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/redis/go-redis/v9"
	"go.uber.org/fx"
	"go.uber.org/zap"

	"github.com/redisfx/redisfx/bench/internal/protocol"
	"github.com/redisfx/redisfx/httpfx"
	"github.com/redisfx/redisfx/idempotencyfx"
	"github.com/redisfx/redisfx/metricsfx"
	"github.com/redisfx/redisfx/storefx"
	"github.com/redisfx/redisfx/streamfx"
	"github.com/redisfx/redisfx/tracingfx"
)

func main() {
	mode := flag.String("mode", "redisfx", "plain, limit or redisfx")
	addr := flag.String("addr", "127.0.0.1:9000", "listen address")
	redisURL := flag.String("redis", "redis://127.0.0.1:6379", "Redis URL")
	prefix := flag.String("prefix", "bench:", "key prefix")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile here until the server stops")
	memProfile := flag.String("memprofile", "", "write an allocation profile here when the server stops")
	policy := flag.String("policy", "fail-closed", "idempotencyfx ErrorPolicy: fail-closed or fail-open")
	breaker := flag.Bool("breaker", true, "storefx's circuit breaker")
	flag.IntVar(&protocol.Spin, "spin", 0, "limit: hash the body this many times more per keyed request, to give the limit a server's CPU per request without changing what it sends Redis")
	flag.Parse()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			log.Fatal(err)
		}
		_ = pprof.StartCPUProfile(f)
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}
	if *memProfile != "" {
		defer func() {
			f, err := os.Create(*memProfile)
			if err != nil {
				log.Fatal(err)
			}
			_ = pprof.Lookup("allocs").WriteTo(f, 0)
			f.Close()
		}()
	}
	switch *mode {
	case "plain":
		r := chi.NewRouter()
		r.Post("/payments", protocol.Payment)
		serve(*addr, r)
	case "limit":
		opts, err := redis.ParseURL(*redisURL)
		if err != nil {
			log.Fatal(err)
		}
		opts.DisableIdentity = true
		rdb := redis.NewClient(opts)
		r := chi.NewRouter()
		r.With(protocol.Limit(rdb, *prefix, nil)).Post("/payments", protocol.Payment)
		serve(*addr, r)
	case "nethttp", "sdk-floor":
		opts, err := redis.ParseURL(*redisURL)
		if err != nil {
			log.Fatal(err)
		}
		h, stop := floorHandler(opts, *prefix, *mode == "sdk-floor")
		serve(*addr, h)
		stop()
	case "redisfx":
		app := fx.New(fx.NopLogger,
			fx.Provide(func() *zap.Logger { return zap.NewNop() }),
			fx.Supply(&storefx.Config{URL: *redisURL}, &httpfx.Config{Addr: *addr},
				&idempotencyfx.Config{KeyPrefix: *prefix, DefaultTTL: time.Hour}, &metricsfx.Config{Prefix: "bench"}),
			storefx.Module, metricsfx.Module, idempotencyfx.Module, httpfx.Module,
			fx.Provide(httpfx.AsRoutes(func() httpfx.Routes {
				return func(r chi.Router) { r.With(idempotencyfx.Idempotent()).Post("/payments", protocol.Payment) }
			})),
		)
		if err := app.Start(context.Background()); err != nil {
			log.Fatal(err)
		}
		<-app.Wait()
		_ = app.Stop(context.Background())
	case "stack", "stack-notracing", "stack-emit":
		app := fx.New(append(stackOptions(stackConfig{
			redisURL: *redisURL, addr: *addr, prefix: *prefix, policy: idempotencyfx.ErrorPolicy(*policy),
			breaker: *breaker, tracing: *mode != "stack-notracing", emit: *mode == "stack-emit",
		}), fx.Provide(zap.NewProduction))...)
		if err := app.Start(context.Background()); err != nil {
			log.Fatal(err)
		}
		<-app.Wait()
		_ = app.Stop(context.Background())
	default:
		fmt.Fprintf(os.Stderr, "unknown -mode %q\n", *mode)
		os.Exit(2)
	}
}

func serve(addr string, h http.Handler) {
	srv := &http.Server{Addr: addr, Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
		<-sig
		_ = srv.Shutdown(context.Background())
	}()
	if err := srv.ListenAndServe(); err != nil && err != http.ErrServerClosed {
		log.Fatal(err)
	}
}

// stackConfig is what differs between the README stacks measured.
type stackConfig struct {
	redisURL, addr, prefix string
	policy                 idempotencyfx.ErrorPolicy
	breaker, tracing, emit bool
}

// stackOptions wire the app as the README does (storefx, metricsfx,
// idempotencyfx, httpfx, tracingfx unless left out) with one idempotent
// route; the caller provides the *zap.Logger.
func stackOptions(c stackConfig) []fx.Option {
	opts := []fx.Option{fx.NopLogger,
		fx.Supply(&storefx.Config{URL: c.redisURL, Breaker: storefx.BreakerConfig{Disabled: !c.breaker}}, &httpfx.Config{Addr: c.addr},
			&idempotencyfx.Config{KeyPrefix: c.prefix, DefaultTTL: time.Hour, ErrorPolicy: c.policy},
			&metricsfx.Config{Prefix: "bench"}),
		storefx.Module, metricsfx.Module, idempotencyfx.Module, httpfx.Module,
		fx.Provide(httpfx.AsRoutes(func() httpfx.Routes {
			h := protocol.Payment
			if c.emit {
				h = emitting
			}
			return func(r chi.Router) { r.With(idempotencyfx.Idempotent()).Post("/payments", h) }
		})),
	}
	if c.tracing {
		opts = append(opts, tracingfx.Module)
	}
	if c.emit {
		opts = append(opts, fx.Supply(&streamfx.Config{MaxLen: 100_000, Retention: time.Hour}), streamfx.Module)
	}
	return opts
}

// emitting is payment announcing the payment through the outbox, as the
// payments example does.
func emitting(w http.ResponseWriter, r *http.Request) {
	if err := idempotencyfx.Emit(r.Context(), "payment.created", protocol.Body); err != nil && !errors.Is(err, idempotencyfx.ErrNoOutbox) {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	protocol.Payment(w, r)
}
