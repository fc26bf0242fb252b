package httpfx

import (
	"net/http"
	"strconv"
	"time"

	"github.com/felixge/httpsnoop"
	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
)

// UnmatchedRoute is the route label of requests that matched no route, so
// that scanners probing random paths cannot grow the metric's cardinality.
const UnmatchedRoute = "unmatched"

// requestMetrics are the per-route HTTP metrics.
type requestMetrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

func newRequestMetrics(reg prometheus.Registerer) (*requestMetrics, error) {
	if reg == nil {
		return nil, nil
	}
	m := &requestMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "http_requests_total",
			Help: "HTTP requests by method, route pattern and status code.",
		}, []string{"method", "route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "http_request_duration_seconds",
			Help:    "HTTP request latency by method and route pattern.",
			Buckets: prometheus.DefBuckets,
		}, []string{"method", "route"}),
	}
	for _, c := range []prometheus.Collector{m.requests, m.duration} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// routePattern is the chi route pattern the request matched, known only
// after routing.
func routePattern(r *http.Request) string {
	if rc := chi.RouteContext(r.Context()); rc != nil {
		if p := rc.RoutePattern(); p != "" {
			return p
		}
	}
	return UnmatchedRoute
}

// observe is the access log, the request metrics, and the naming of the
// SERVER span after routing: "METHOD /route/pattern" with http.route.
func observe(log *zap.Logger, m *requestMetrics) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			began := time.Now()
			metrics := httpsnoop.CaptureMetricsFn(w, func(w http.ResponseWriter) { next.ServeHTTP(w, r) })
			route := routePattern(r)
			span := trace.SpanFromContext(r.Context())
			if span.IsRecording() {
				if route != UnmatchedRoute {
					span.SetName(r.Method + " " + route)
					span.SetAttributes(attribute.String("http.route", route))
				}
			}
			if m != nil {
				m.requests.WithLabelValues(r.Method, route, strconv.Itoa(metrics.Code)).Inc()
				m.duration.WithLabelValues(r.Method, route).Observe(time.Since(began).Seconds())
			}
			if ce := log.Check(zap.InfoLevel, "request"); ce != nil {
				fields := []zap.Field{
					zap.String("method", r.Method), zap.String("route", route), zap.String("path", r.URL.Path),
					zap.Int("status", metrics.Code), zap.Duration("duration", metrics.Duration),
					zap.Int64("bytes", metrics.Written), zap.String("request_id", w.Header().Get(RequestIDHeader)),
				}
				if sc := span.SpanContext(); sc.IsValid() {
					fields = append(fields, zap.String("trace_id", sc.TraceID().String()), zap.String("span_id", sc.SpanID().String()))
				}
				ce.Write(fields...)
			}
		})
	}
}
