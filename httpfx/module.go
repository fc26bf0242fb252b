package httpfx

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/fx"
	"go.uber.org/zap"

	"github.com/redisfx/redisfx/internal/fxconfig"
	"github.com/redisfx/redisfx/storefx"
)

// Module provides the chi router (chi.Router and *chi.Mux), the error chain
// (*Errors) and a *Server that starts and stops with the app; all are used
// by other modules or the app, so none is private.
//
// It needs a *zap.Logger. It uses, when present: a Config (else the
// defaults, on :8080), a trace.TracerProvider and
// propagation.TextMapPropagator (tracingfx) for SERVER spans, a
// prometheus.Registerer and Gatherer (metricsfx.Module) for request metrics
// and /metrics, and a *storefx.Registry for /readyz.
var Module = fx.Module("redisfx.http",
	fx.Invoke(checkCollaborators),
	fx.Provide(fx.Private, configOf),
	fx.Provide(
		newErrors,
		newRouter,
		func(m *chi.Mux) chi.Router { return m },
		newServer,
	),
	fx.Invoke(func(*Server) {}),
)

// collaborators are optional here only so that a missing one gets a message
// naming what to add.
type collaborators struct {
	fx.In
	Log *zap.Logger `optional:"true"`
}

func checkCollaborators(c collaborators) error {
	if c.Log == nil {
		return errors.New("httpfx.Module needs a *zap.Logger: provide one, e.g. fx.Provide(zap.NewProduction)")
	}
	return nil
}

type errorsParams struct {
	fx.In
	Log     *zap.Logger
	Filters []RegisteredErrorFilter `group:"redisfx.http.error_filters"`
}

func newErrors(p errorsParams) *Errors { return NewErrors(p.Log, p.Filters...) }

// settings is the app's Config with the defaults, private to the module.
type settings struct{ Config }

type configParams struct {
	fx.In
	Config      *Config `optional:"true"`
	ConfigValue Config  `optional:"true"`
}

func configOf(p configParams) (settings, error) {
	c, err := fxconfig.Pick(p.Config, p.ConfigValue)
	if err != nil {
		return settings{}, fmt.Errorf("httpfx: %w", err)
	}
	c, err = c.withDefaults()
	return settings{c}, err
}

type routerParams struct {
	fx.In
	Config     settings
	Log        *zap.Logger
	Errors     *Errors
	Routes     []Routes                      `group:"redisfx.http.routes"`
	Middleware []Middleware                  `group:"redisfx.http.middleware"`
	Values     []ContextValue                `group:"redisfx.http.context_values"`
	Readiness  []ReadinessCheck              `group:"redisfx.http.readiness"`
	Store      *storefx.Registry             `optional:"true"`
	Tracer     trace.TracerProvider          `optional:"true"`
	Propagator propagation.TextMapPropagator `optional:"true"`
	Registerer prometheus.Registerer         `optional:"true"`
	Gatherer   prometheus.Gatherer           `optional:"true"`
}

func newRouter(p routerParams) (*chi.Mux, error) {
	var metrics *requestMetrics // nil without a registry: no route metrics
	if p.Registerer != nil {
		var err error
		if metrics, err = newRequestMetrics(p.Registerer); err != nil {
			return nil, fmt.Errorf("httpfx: registering request metrics: %w", err)
		}
	}
	if err := checkContextValues(p.Values); err != nil {
		return nil, err
	}
	r := chi.NewRouter()
	f := &front{errors: p.Errors, propagator: p.Propagator, log: p.Log, metrics: metrics, values: p.Values}
	if p.Tracer != nil {
		f.tracer = p.Tracer.Tracer(TracerName)
	}
	r.Use(f.wrap)
	r.Use(recoverer(p.Log))
	for _, m := range ordered(p.Middleware, middlewareOrder) {
		r.Use(m.Wrap)
	}
	r.NotFound(notFound)
	r.MethodNotAllowed(methodNotAllowed(r))
	mountProbes(r, p)
	for _, routes := range p.Routes {
		routes(r)
	}
	return r, nil
}

func mountProbes(r chi.Router, p routerParams) {
	if !p.Config.DisableHealth {
		r.Get(HealthPath, healthz)
	}
	if !p.Config.DisableReady {
		checks := append([]ReadinessCheck(nil), p.Readiness...)
		if p.Store != nil {
			checks = append(checks, ReadinessCheck{Name: "redis", Check: p.Store.Ready})
		}
		r.Get(ReadyPath, readyz(checks, p.Log))
	}
	switch {
	case p.Config.DisableMetrics:
	case p.Gatherer == nil:
		p.Log.Info("httpfx: " + MetricsPath + " is not served: no prometheus.Gatherer in the app (add metricsfx.Module)")
	default:
		r.Method(http.MethodGet, MetricsPath, promhttp.HandlerFor(p.Gatherer, promhttp.HandlerOpts{}))
	}
}

type serverParams struct {
	fx.In
	Config     settings
	Router     *chi.Mux
	Log        *zap.Logger
	Lifecycle  fx.Lifecycle
	Shutdowner fx.Shutdowner
}

// newServer builds the http.Server. OnStart listens synchronously (a taken
// port fails start-up) and serves in a goroutine; a serve error stops the
// app. OnStop drains within ShutdownTimeout; its hook runs before those of
// the modules the routes use (Redis, tracing), as Fx stops in reverse.
func newServer(p serverParams) *Server {
	cfg := p.Config.Config
	srv := &Server{Server: &http.Server{
		Addr:              cfg.Addr,
		Handler:           p.Router,
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		ReadTimeout:       cfg.ReadTimeout,
		WriteTimeout:      cfg.WriteTimeout,
		IdleTimeout:       cfg.IdleTimeout,
		MaxHeaderBytes:    cfg.MaxHeaderBytes,
		ErrorLog:          zap.NewStdLog(p.Log.Named("http")),
	}}
	served := make(chan struct{})
	p.Lifecycle.Append(fx.Hook{
		OnStart: func(ctx context.Context) error {
			ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", cfg.Addr)
			if err != nil {
				return fmt.Errorf("httpfx: cannot listen on %s: %w", cfg.Addr, err)
			}
			srv.addr.Store(ln.Addr().String())
			p.Log.Info("http server listening", zap.String("addr", ln.Addr().String()))
			go func() {
				defer close(served)
				if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
					p.Log.Error("http server failed; stopping the app", zap.Error(err))
					_ = p.Shutdowner.Shutdown(fx.ExitCode(1))
				}
			}()
			return nil
		},
		OnStop: func(ctx context.Context) error {
			defer func() { <-served }()
			return srv.drain(ctx, cfg.ShutdownTimeout, p.Log)
		},
	})
	return srv
}

// drain shuts s down within shutdownTimeout (see drainBound), and closes
// what is left.
func (s *Server) drain(ctx context.Context, shutdownTimeout time.Duration, log *zap.Logger) error {
	drain := drainBound(ctx, shutdownTimeout)
	if drain < shutdownTimeout {
		log.Warn("httpfx: draining for less than ShutdownTimeout, so that the hooks after the server still run; raise fx.StopTimeout",
			zap.Duration("drain", drain), zap.Duration("shutdown_timeout", shutdownTimeout))
	}
	dctx, cancel := context.WithTimeout(ctx, drain)
	defer cancel()
	err := s.Shutdown(dctx)
	if err != nil {
		_ = s.Close()
	}
	return err
}

// drainReserve is the most of Fx's stop time the drain leaves to the hooks
// after the server.
const drainReserve = 5 * time.Second

// drainBound is how long the server may drain: ShutdownTimeout, less a third
// of the time left in Fx's stop context (at most drainReserve), so that the
// hooks after it (Redis, the span flush) still run.
func drainBound(ctx context.Context, shutdownTimeout time.Duration) time.Duration {
	deadline, ok := ctx.Deadline()
	if !ok {
		return shutdownTimeout
	}
	left := time.Until(deadline)
	return max(min(shutdownTimeout, left-min(left/3, drainReserve)), 0)
}

// Server is the application's HTTP server.
type Server struct {
	*http.Server
	addr atomic.Value // string, set when listening
}

// Addr is the address the started server listens on, resolved (useful with
// Config.Addr ":0"). Empty before start.
func (s *Server) Addr() string {
	a, _ := s.addr.Load().(string)
	return a
}

// URL is http://<Addr>, with a loopback host when listening on all interfaces.
func (s *Server) URL() string {
	host, port, _ := net.SplitHostPort(s.Addr())
	if host == "" || host == "::" || host == "0.0.0.0" {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port)
}
