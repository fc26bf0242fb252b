// Command assembled is the hand-assembled stack bench/run measures the
// README stack against: the limit's round trips (the same scripts, see
// bench/internal/protocol) behind what a Go team wires by hand, each with
// its defaults: otelhttp, chi's RequestID, a zap access log
// (zap.NewProduction, as the stack's), a client_golang Prometheus
// middleware, and redisotel's tracing and metrics (the OpenTelemetry
// Prometheus exporter). The SDK is set up as the stack's default
// (ParentBased(AlwaysSample), or OTEL_TRACES_SAMPLER, which the SDK reads;
// no exporter unless OTEL_EXPORTER_OTLP_ENDPOINT is set, then OTLP/HTTP
// behind the batch processor). Its own module, so that applications
// importing redisfx do not get otelhttp and redisotel.
//
//	assembled -addr 127.0.0.1:9000 -redis redis://127.0.0.1:6379 -prefix bench:
package main

import (
	"context"
	"flag"
	"log"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/extra/redisotel/v9"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/redisfx/redisfx/bench/internal/protocol"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:9000", "listen address")
	redisURL := flag.String("redis", "redis://127.0.0.1:6379", "Redis URL")
	prefix := flag.String("prefix", "bench:", "key prefix")
	flag.Parse()
	ctx := context.Background()

	tracing := []sdktrace.TracerProviderOption{sdktrace.WithResource(resource.Default())}
	if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" {
		exp, err := otlptracehttp.New(ctx)
		if err != nil {
			log.Fatal(err)
		}
		tracing = append(tracing, sdktrace.WithBatcher(exp))
	}
	tp := sdktrace.NewTracerProvider(tracing...)
	defer func() { _ = tp.Shutdown(ctx) }()
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	exporter, err := otelprom.New()
	if err != nil {
		log.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))

	logger, err := zap.NewProduction()
	if err != nil {
		log.Fatal(err)
	}
	opts, err := redis.ParseURL(*redisURL)
	if err != nil {
		log.Fatal(err)
	}
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	if err := redisotel.InstrumentTracing(rdb); err != nil {
		log.Fatal(err)
	}
	if err := redisotel.InstrumentMetrics(rdb, redisotel.WithMeterProvider(mp)); err != nil {
		log.Fatal(err)
	}

	r := chi.NewRouter()
	r.Use(middleware.RequestID, accessLog(logger), metrics())
	r.Handle("/metrics", promhttp.Handler())
	r.With(protocol.Limit(rdb, *prefix, nil)).Post("/payments", protocol.Payment)

	srv := &http.Server{Addr: *addr, Handler: otelhttp.NewHandler(r, "server"), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
		<-sig
		_ = srv.Shutdown(ctx)
	}()
	if err := srv.ListenAndServe(); err != nil && err != http.ErrServerClosed {
		log.Fatal(err)
	}
}

// accessLog writes a line per request with the request and trace ids.
func accessLog(logger *zap.Logger) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			began := time.Now()
			ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
			next.ServeHTTP(ww, r)
			sc := trace.SpanContextFromContext(r.Context())
			logger.Info("request", zap.String("method", r.Method), zap.String("path", r.URL.Path),
				zap.Int("status", ww.Status()), zap.Duration("duration", time.Since(began)), zap.Int("bytes", ww.BytesWritten()),
				zap.String("request_id", middleware.GetReqID(r.Context())), zap.String("trace_id", sc.TraceID().String()))
		})
	}
}

// metrics counts the requests and their durations by method, route and
// status, and names the SERVER span after the route.
func metrics() func(http.Handler) http.Handler {
	labels := []string{"method", "route", "code"}
	duration := promauto.NewHistogramVec(prometheus.HistogramOpts{Name: "http_request_duration_seconds",
		Help: "Time to answer an HTTP request."}, labels)
	total := promauto.NewCounterVec(prometheus.CounterOpts{Name: "http_requests_total", Help: "HTTP requests answered."}, labels)
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			began := time.Now()
			ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
			next.ServeHTTP(ww, r)
			route := chi.RouteContext(r.Context()).RoutePattern()
			code := strconv.Itoa(ww.Status())
			duration.WithLabelValues(r.Method, route, code).Observe(time.Since(began).Seconds())
			total.WithLabelValues(r.Method, route, code).Inc()
			span := trace.SpanFromContext(r.Context())
			span.SetName(r.Method + " " + route)
			span.SetAttributes(semconv.HTTPRoute(route))
		})
	}
}
