// Command payments is the redisfx showcase: a small payments API whose
// POST /payments runs once per Idempotency-Key, traced and measured. See
// the contract in docs/ and the README's quick start.
package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"syscall"
	"time"

	"go.uber.org/fx"
	"go.uber.org/fx/fxevent"
	"go.uber.org/zap"

	"github.com/redisfx/redisfx"
	"github.com/redisfx/redisfx/cachefx"
	"github.com/redisfx/redisfx/httpfx"
	"github.com/redisfx/redisfx/idempotencyfx"
	"github.com/redisfx/redisfx/internal/embedded"
	"github.com/redisfx/redisfx/lockfx"
	"github.com/redisfx/redisfx/metricsfx"
	"github.com/redisfx/redisfx/plugintrace"
	"github.com/redisfx/redisfx/ratelimitfx"
	"github.com/redisfx/redisfx/storefx"
	"github.com/redisfx/redisfx/streamfx"
	"github.com/redisfx/redisfx/tracingfx"
)

func main() {
	log, err := zap.NewProduction() // JSON on stderr
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	env, err := LoadEnv(os.Getenv)
	if err != nil {
		log.Error("invalid configuration; not starting", zap.Error(err))
		_ = log.Sync()
		os.Exit(2)
	}
	app := fx.New(App(env, log))
	if err := app.Err(); err != nil {
		// Fx has logged the error. A module's configuration error (an
		// OTEL_* variable that tracingfx refuses) is a configuration error
		// like the example's own: exit 2.
		if errors.As(err, new(*redisfx.ConfigError)) {
			os.Exit(2)
		}
		os.Exit(1)
	}
	os.Exit(run(app, env, log)) // SIGINT/SIGTERM: drain, flush, close, exit 0
}

// run is fx's App.Run, with one difference: a start that fails because of
// a variable's value is reported naming it, as an invalid value (exit 2)
// when the value itself is at fault. That is any configuration error
// storefx returns when REDIS_URL is set (the example's storefx settings
// are REDIS_URL and its own client name: Redis refused the database, the
// password, its absence, the ACL user; storefx names its own field), and
// an HTTP_ADDR the server cannot listen on because of the address: a host
// that does not resolve or is not an address of this machine. A listen
// that fails for another reason (the address in use, a port below 1024
// without the privilege) names HTTP_ADDR and exits 1.
func run(app *fx.App, env Env, log *zap.Logger) int {
	startCtx, cancel := context.WithTimeout(context.Background(), app.StartTimeout())
	err := app.Start(startCtx)
	cancel()
	if err != nil { // Fx has logged it
		invalid := func(variable, value, reason string) int {
			log.Error("invalid configuration; not starting", zap.Error(&EnvError{variable, value, reason}))
			_ = log.Sync()
			return 2
		}
		var ce *redisfx.ConfigError
		if errors.As(err, &ce) && ce.Package == "storefx" && env.RedisURL != "" {
			return invalid("REDIS_URL", redactURL(env.RedisURL), "Redis refused it: "+ce.Reason)
		}
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "listen" {
			if reason := badListenHost(op); reason != "" {
				return invalid("HTTP_ADDR", env.HTTPAddr, reason)
			}
			log.Error("cannot listen on HTTP_ADDR; not starting", zap.String("HTTP_ADDR", env.HTTPAddr), zap.Error(op))
			_ = log.Sync()
		}
		return 1
	}
	sig := <-app.Wait()
	stopCtx, cancel := context.WithTimeout(context.Background(), app.StopTimeout())
	defer cancel()
	if err := app.Stop(stopCtx); err != nil {
		return 1
	}
	return sig.ExitCode
}

// badListenHost says what is wrong with the address of a failed listen
// when the address itself is at fault, or "": a host that does not resolve
// (a DNS failure that is not a timeout or a temporary one), one that is not
// an address of this machine, or no usable address.
func badListenHost(op *net.OpError) string {
	var dns *net.DNSError
	var addr *net.AddrError
	switch {
	case errors.As(op, &dns) && !dns.IsTimeout && !dns.IsTemporary:
		return "the host does not resolve (" + dns.Error() + ")"
	case errors.Is(op, syscall.EADDRNOTAVAIL):
		return "the host is not an address of this machine"
	case errors.Is(op, syscall.EINVAL):
		// The kernel cannot bind it as written: an IPv6 link-local
		// address (fe80::/10) without its interface or with an unknown one.
		return "the address cannot be bound as written (an IPv6 link-local address needs its interface: [fe80::1%eth0]:8080)"
	case errors.As(op, &addr):
		return "no usable address (" + addr.Error() + ")"
	}
	return ""
}

// App is the whole application for env, built only from redisfx modules.
func App(env Env, log *zap.Logger) fx.Option {
	return fx.Options(
		fx.Supply(env, log),
		fx.StopTimeout(stopTimeout(env)),
		fx.WithLogger(func(l *zap.Logger) fxevent.Logger {
			return &fxevent.ZapLogger{Logger: l.Named("fx").WithOptions(zap.IncreaseLevel(zap.WarnLevel))}
		}),
		fx.Provide(redisConfig, idempotencyConfig, tracingConfig, httpConfig, metricsConfig,
			cacheConfig, lockConfig, rateLimitConfig, streamConfig),
		storefx.Module,
		storefx.RouteRedisLogs, // go-redis's own log lines (a failed dial) as zap JSON on stderr, like every other
		tracingfx.Module,
		metricsfx.Module,
		idempotencyfx.Module,
		cachefx.Module,
		lockfx.Module,
		ratelimitfx.Module,
		streamfx.Module,
		httpfx.Module,
		fx.Provide(NewPaymentService, httpfx.AsRoutes((*PaymentService).Routes)),
		fx.Provide(NewReceipts, streamfx.AsHandler((*Receipts).Handler)),
		// The app's own problem types: decorate the built-in idempotency filter.
		fx.Decorate(func(next idempotencyfx.ErrorFilter) idempotencyfx.ErrorFilter {
			return func(err error, r *http.Request) (httpfx.Problem, bool) {
				p, ok := next(err, r)
				if ok {
					p.Type = "https://payments.example/problems/" + p.Code
				}
				return p, ok
			}
		}),
	)
}

// redisConfig uses REDIS_URL, or starts an embedded Redis and says so.
func redisConfig(env Env, lc fx.Lifecycle, log *zap.Logger) (*storefx.Config, error) {
	if env.RedisURL != "" {
		return &storefx.Config{URL: env.RedisURL, ClientName: "payments"}, nil
	}
	r, err := embedded.Start()
	if err != nil {
		return nil, fmt.Errorf("embedded redis: %w", err)
	}
	lc.Append(fx.StopHook(r.Close)) // registered before the client's hooks, so it stops after them
	log.Info("REDIS_URL is not set: using an embedded in-memory Redis (nothing survives a restart; set REDIS_URL for a real server)",
		zap.String("addr", r.Addr()))
	return &storefx.Config{URL: r.URL()}, nil
}

func idempotencyConfig(env Env) *idempotencyfx.Config {
	return &idempotencyfx.Config{
		DefaultTTL:  env.TTL,
		HeaderName:  env.Header,
		KeyPrefix:   env.KeyPrefix,
		LockTimeout: env.LockTimeout,
		WaitTimeout: env.WaitTimeout,
		NoWait:      env.WaitTimeout == 0,
		ErrorPolicy: env.ErrorPolicy,
	}
}

func tracingConfig(env Env) *tracingfx.Config {
	return &tracingfx.Config{
		ServiceName:   env.ServiceName,
		Exporter:      tracingfx.ExporterConfig{Type: env.TracingExporter},
		PluginTracing: true,
	}
}

// httpConfig: the server's timeouts follow from the settings (see
// requestBound), so that no answer the settings allow is cut off by the
// WriteTimeout and a stop waits for every request in flight.
func httpConfig(env Env) *httpfx.Config {
	return &httpfx.Config{
		Addr:            env.HTTPAddr,
		ReadTimeout:     httpReadTimeout,
		WriteTimeout:    max(requestBound(env), httpfxWriteTimeout),
		ShutdownTimeout: drainTimeout(env),
	}
}

const (
	// httpReadTimeout bounds reading a whole request, body included: 10 s
	// rather than httpfx's 30 s, since a payment body is at most 64 KiB
	// and the idempotency layer reads at most 1 MiB (100 KiB/s is enough
	// for that), and a stop must wait for a client that stalls in the
	// middle of its body until this runs out.
	httpReadTimeout = 10 * time.Second
	// httpfxWriteTimeout is httpfx's default WriteTimeout: the example never
	// sets a shorter one.
	httpfxWriteTimeout = 60 * time.Second
	// redisMargin is the time beyond the waits for the Redis round trips
	// of a request (the claim, the card lock, the publish, the completion,
	// each bounded by its own timeout of a few seconds).
	redisMargin = 15 * time.Second
)

// requestBound is the longest a legitimate request takes, from the first
// byte of its headers to its answer: reading it (httpReadTimeout), a
// duplicate's wait (IDEMPOTENCY_WAIT_TIMEOUT), then the payment (a waiter
// whose first request's record disappears takes it over and runs it:
// PAYMENTS_DELAY, and the wait for the card's lock when it is on), and
// redisMargin. It is the server's WriteTimeout (at least httpfx's 60 s)
// and the drain of a stop.
func requestBound(env Env) time.Duration {
	work := env.PaymentsDelay
	if env.CardLock {
		work += env.LockWait
	}
	return httpReadTimeout + env.WaitTimeout + work + redisMargin
}

// drainTimeout is how long a stop waits for the requests in flight: as long
// as one can take (requestBound), so that a stop never cuts a request off,
// leaves a payment's record in progress, or fails on a slow upload.
func drainTimeout(env Env) time.Duration { return requestBound(env) }

// stopTimeout bounds the whole stop: the drain, then the span flush and
// closing Redis.
func stopTimeout(env Env) time.Duration { return drainTimeout(env) + 15*time.Second }

func metricsConfig(env Env) *metricsfx.Config { return &metricsfx.Config{Prefix: env.MetricsPrefix} }

// cacheConfig: payments never change once recorded, so a first layer in
// each process serves repeated reads without a round trip.
func cacheConfig() *cachefx.Config {
	return &cachefx.Config{Local: cachefx.LocalConfig{MaxEntries: 10000, TTL: time.Minute}}
}

// lockConfig: a card's lock is held only for the charge itself, so a
// short first backoff keeps concurrent payments with one card quick. The
// lock is named "card:<number>": spans carry a keyed digest of the name,
// never the card number, and the spans of one card still share it.
func lockConfig(env Env) *lockfx.Config {
	return &lockfx.Config{TTL: 10 * time.Second, Attempts: 1 << 20, Backoff: time.Millisecond, MaxBackoff: 20 * time.Millisecond, WaitTimeout: env.LockWait,
		KeyAttribute: plugintrace.HashKey(env.KeyHashSecret)}
}

func rateLimitConfig(env Env) *ratelimitfx.Config {
	return &ratelimitfx.Config{Limit: max(env.RateLimit, 1), Window: max(env.RateLimitWindow, time.Minute), TrustedProxies: env.TrustedProxies}
}

// streamConfig: payment.created keeps about the last 100,000 events, for
// at most 7 days after the last one.
func streamConfig() *streamfx.Config {
	return &streamfx.Config{Group: "payments", MaxLen: 100000, Retention: 7 * 24 * time.Hour}
}
