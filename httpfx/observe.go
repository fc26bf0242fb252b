package httpfx

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/redisfx/redisfx/internal/readmostly"
)

// UnmatchedRoute is the route label of requests no route matched, so that
// scanners cannot grow the metrics' cardinality.
const UnmatchedRoute = "unmatched"

// requestMetrics are the per-route HTTP metrics.
type requestMetrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	// The children, looked up once per label set, read without a lock.
	children readmostly.Map[routeKey, routeChildren]
}

type routeKey struct {
	method, route string
	code          int
}

type routeChildren struct {
	requests prometheus.Counter
	duration prometheus.Observer
}

// observe counts a request and records its duration. The children are as
// few as the labels: methods HTTP does not define share one, and so do the
// paths no route matches.
func (m *requestMetrics) observe(method, route string, code int, took time.Duration) {
	c := m.children.LoadOrCreate(routeKey{method, route, code}, m.newChildren)
	c.requests.Inc()
	c.duration.Observe(took.Seconds())
}

func (m *requestMetrics) newChildren(k routeKey) routeChildren {
	return routeChildren{
		requests: m.requests.WithLabelValues(k.method, k.route, strconv.Itoa(k.code)),
		duration: m.duration.WithLabelValues(k.method, k.route),
	}
}

func newRequestMetrics(reg prometheus.Registerer) (*requestMetrics, error) {
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

// routePattern is the chi route pattern the request matched, UnmatchedRoute
// when the router's 404 or 405 answered.
func routePattern(st *requestState) string {
	if !st.unmatched {
		if p := st.routing.RoutePattern(); p != "" {
			return p
		}
	}
	return UnmatchedRoute
}

// front is the router's first middleware: the request id, the SERVER span
// and the request's context node, then the route metrics and access log.
type front struct {
	errors     *Errors
	tracer     trace.Tracer                  // nil: no SERVER spans
	propagator propagation.TextMapPropagator // nil: the global one, read per request
	log        *zap.Logger
	metrics    *requestMetrics // nil: no route metrics
	values     []ContextValue  // what every request's context carries
}

func (f *front) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { f.serve(w, r, next) })
}

// serverKind is made once: a variadic list passed to Tracer.Start is
// allocated per call.
var serverKind = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer)}

// TracerName is the instrumentation scope of the SERVER spans.
const TracerName = "github.com/redisfx/redisfx/httpfx"

func (f *front) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	// The root router's routing context, which sub-routers fill too.
	state := &requestState{errors: f.errors, values: f.values, routing: chi.RouteContext(r.Context())}
	id := r.Header.Get(RequestIDHeader)
	if id == "" || len(id) > 128 || strings.ContainsFunc(id, func(c rune) bool { return c < 0x21 || c > 0x7e }) { // not 1-128 visible ASCII
		id = state.newRequestID()
	}
	state.id, state.idHeader[0] = id, id
	w.Header()[RequestIDHeader] = state.idHeader[:] // canonical already: no Set
	ctx := r.Context()
	probe := r.URL.Path == HealthPath || r.URL.Path == ReadyPath || r.URL.Path == MetricsPath
	var span trace.Span
	if f.tracer != nil && !probe {
		prop := f.propagator
		if prop == nil {
			prop = otel.GetTextMapPropagator()
		}
		ctx = prop.Extract(ctx, requestCarrier(r.Header))
		ctx, span = f.tracer.Start(ctx, methodOr(r.Method, "HTTP"), serverKind...)
		defer span.End()
		if span.IsRecording() {
			span.SetAttributes(requestAttributes(r)...)
		}
	}
	state.Context = ctx
	ctx = state
	r = r.WithContext(ctx)
	ww := state.writer.wrap(w, r.ProtoMajor) // in the state: no allocation of its own
	began := time.Now()
	returned := false
	defer func() {
		if returned {
			return
		}
		// A panic here is http.ErrAbortHandler, the one the recovery lets
		// through: the answer is aborted. Else runtime.Goexit, which the
		// recovery answered or marked aborted.
		p := recover()
		state.aborted = state.aborted || p != nil
		f.observe(ctx, r, state, span, probe, began)
		if p != nil {
			panic(p)
		}
	}()
	next.ServeHTTP(ww, r)
	returned = true
	f.observe(ctx, r, state, span, probe, began)
}

// observe records a request once its handler is done. An aborted request
// counts as a 500 (no complete answer went out), its log line marked so.
func (f *front) observe(ctx context.Context, r *http.Request, state *requestState, span trace.Span, probe bool, began time.Time) {
	code, written, took := state.writer.code, state.writer.bytes, time.Since(began)
	if r.Method == http.MethodHead {
		written = 0 // net/http sends no body
	}
	switch {
	case state.aborted:
		code = http.StatusInternalServerError
	case code == 0: // nothing written: net/http sends 200
		code = http.StatusOK
	}
	route := routePattern(state)
	if span != nil && span.IsRecording() {
		attrs := make([]attribute.KeyValue, 0, 3)
		if route != UnmatchedRoute {
			span.SetName(methodOr(r.Method, "HTTP") + " " + route)
			attrs = append(attrs, semconv.HTTPRoute(route))
		}
		span.SetAttributes(append(attrs, semconv.HTTPResponseStatusCode(code), semconv.HTTPResponseBodySize(written))...)
		if code >= http.StatusInternalServerError {
			span.SetStatus(codes.Error, "")
		}
	}
	if f.metrics != nil {
		f.metrics.observe(methodOr(r.Method, "_OTHER"), route, code, took)
	}
	level := zap.InfoLevel
	if probe {
		level = zap.DebugLevel
	}
	if ce := f.log.Check(level, "request"); ce != nil {
		fields := []zap.Field{
			zap.String("method", r.Method), zap.String("route", route), zap.String("path", r.URL.Path),
			zap.Int("status", code), zap.Duration("duration", took),
			zap.Int("bytes", written), zap.String("request_id", state.id),
		}
		if state.aborted {
			fields = append(fields, zap.Bool("aborted", true))
		}
		if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
			fields = append(fields, zap.String("trace_id", sc.TraceID().String()), zap.String("span_id", sc.SpanID().String()))
		}
		ce.Write(fields...)
	}
}

// requestAttributes are the SERVER span's request attributes (OpenTelemetry
// HTTP semantic conventions), built only for a recording span.
func requestAttributes(r *http.Request) []attribute.KeyValue {
	attrs := make([]attribute.KeyValue, 0, 12)
	method := methodOr(r.Method, "_OTHER")
	if method != r.Method {
		attrs = append(attrs, semconv.HTTPRequestMethodOriginal(r.Method))
	}
	attrs = append(attrs, semconv.HTTPRequestMethodKey.String(method))
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	attrs = append(attrs, semconv.URLScheme(scheme), semconv.URLPath(r.URL.Path))
	if host, port := splitHostPort(r.Host); host != "" {
		attrs = append(attrs, semconv.ServerAddress(host))
		if port > 0 {
			attrs = append(attrs, semconv.ServerPort(port))
		}
	}
	if peer, port := splitHostPort(r.RemoteAddr); peer != "" {
		attrs = append(attrs, semconv.NetworkPeerAddress(peer))
		if port > 0 {
			attrs = append(attrs, semconv.NetworkPeerPort(port))
		}
		client := peer
		if fwd := r.Header.Get("X-Forwarded-For"); fwd != "" {
			if i := strings.IndexByte(fwd, ','); i >= 0 {
				fwd = fwd[:i]
			}
			client = strings.TrimSpace(fwd)
		}
		attrs = append(attrs, semconv.ClientAddress(client))
	}
	if ua := r.Header.Get("User-Agent"); ua != "" {
		attrs = append(attrs, semconv.UserAgentOriginal(ua))
	}
	if r.ProtoMajor > 0 {
		attrs = append(attrs, semconv.NetworkProtocolVersion(protocolVersion(r.ProtoMajor, r.ProtoMinor)))
	}
	return attrs
}

// protocolVersion is network.protocol.version: "1.1" (without allocating),
// or "2" from HTTP/2 on.
func protocolVersion(major, minor int) string {
	switch {
	case major == 1 && minor == 1:
		return "1.1"
	case major >= 2:
		return strconv.Itoa(major)
	}
	return strconv.Itoa(major) + "." + strconv.Itoa(minor)
}

// methodOr is m when HTTP defines it (RFC 9110 and PATCH), else other:
// "_OTHER" as a metric label, so made-up methods cannot grow the
// cardinality, "HTTP" in a SERVER span's name (OpenTelemetry's HTTP
// conventions).
func methodOr(m, other string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace:
		return m
	}
	return other
}

// splitHostPort splits "host:port", "[v6]:port" or a bare host; port is -1
// when absent or invalid.
func splitHostPort(hp string) (string, int) {
	host, port, err := net.SplitHostPort(hp)
	if err != nil {
		return strings.Trim(hp, "[]"), -1
	}
	p, err := strconv.Atoi(port)
	if err != nil || p <= 0 || p > 65535 {
		return host, -1
	}
	return host, p
}
