package httpfx_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/fx"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/redisfx/redisfx/httpfx"
	"github.com/redisfx/redisfx/tracingfx"
)

// benchRouter serves one POST route through httpfx's router, as the README
// wires it (a production JSON logger, sampled, writing nowhere; the route
// metrics; the TracerProvider tp when not nil), in process: the cost of
// the HTTP stack per request, without the network.
func benchRouter(b *testing.B, tp trace.TracerProvider) {
	b.Helper()
	reg := prometheus.NewRegistry()
	core := zapcore.NewSamplerWithOptions(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()),
		zapcore.AddSync(io.Discard), zap.InfoLevel), 1e9, 100, 100)
	opts := []fx.Option{fx.NopLogger, httpfx.Module,
		fx.Supply(zap.New(core), &httpfx.Config{Addr: "127.0.0.1:0"}),
		fx.Supply(fx.Annotate(reg, fx.As(new(prometheus.Registerer))), fx.Annotate(reg, fx.As(new(prometheus.Gatherer)))),
		fx.Provide(httpfx.AsRoutes(func() httpfx.Routes {
			return func(r chi.Router) {
				r.Post("/payments", func(w http.ResponseWriter, r *http.Request) {
					_, _ = io.ReadAll(r.Body)
					w.Header().Set("Content-Type", "application/json")
					w.WriteHeader(http.StatusCreated)
					_, _ = io.WriteString(w, `{"id":"pay_1","status":"succeeded"}`)
				})
			}
		}))}
	if tp != nil {
		opts = append(opts, fx.Supply(fx.Annotate(tp, fx.As(new(trace.TracerProvider)))))
	}
	var mux *chi.Mux
	app := fx.New(append(opts, fx.Populate(&mux))...)
	if err := app.Err(); err != nil {
		b.Fatal(err)
	}
	body := `{"amount":1250,"currency":"EUR"}`
	b.ReportAllocs()
	for b.Loop() {
		req := httptest.NewRequest(http.MethodPost, "/payments", strings.NewReader(body))
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, req)
		if w.Code != http.StatusCreated {
			b.Fatal(w.Code)
		}
	}
}

func BenchmarkRouter_NoTracing(b *testing.B) { benchRouter(b, nil) }

// tracingfx's default: no OTEL_* variable, so the exporter none.
func BenchmarkRouter_TracingDefault(b *testing.B) {
	for _, k := range []string{"OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_TRACES_SAMPLER", "TRACING_EXPORTER"} {
		b.Setenv(k, "")
	}
	p, err := tracingfx.NewProvider(context.Background(), tracingfx.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = p.Shutdown(context.Background()) }()
	benchRouter(b, p.TracerProvider())
}

// Every request's SERVER span recorded (and handed to no processor).
func BenchmarkRouter_Sampled(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	benchRouter(b, tp)
}

// One request in ten recorded.
func BenchmarkRouter_Ratio10(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.TraceIDRatioBased(0.1)))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	benchRouter(b, tp)
}
