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

// UnmatchedRoute is the route label of requests that matched no route, so
// that scanners probing random paths cannot grow the metric's cardinality.
const UnmatchedRoute = "unmatched"

// requestMetrics are the per-route HTTP metrics.
type requestMetrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	// The children of matched routes, looked up once: routes, their methods
	// and the codes their handlers answer are the app's, so the map stays
	// as small as the router. A readmostly.Map, not a sync.Map: read
	// without a lock in one lookup of a concrete key, where a sync.Map
	// hashes an any key by walking its type at run time (~700 instructions
	// per request for the two lookups this one replaced).
	children readmostly.Map[routeKey, routeChildren]
}

type routeKey struct {
	method, route string
	code          int
}

// routeChildren are the metrics' children of one routeKey.
type routeChildren struct {
	requests prometheus.Counter
	duration prometheus.Observer
}

// observe counts a request and records its duration.
func (m *requestMetrics) observe(method, route string, code int, took time.Duration) {
	if route == UnmatchedRoute { // anything a scanner sends: not cached
		m.requests.WithLabelValues(method, route, strconv.Itoa(code)).Inc()
		m.duration.WithLabelValues(method, route).Observe(took.Seconds())
		return
	}
	k := routeKey{method, route, code}
	c, ok := m.children.Load(k)
	if !ok {
		c = m.children.LoadOrCreate(k, m.newChildren)
	}
	c.requests.Inc()
	c.duration.Observe(took.Seconds())
}

// newChildren looks up k's children in the vectors.
func (m *requestMetrics) newChildren(k routeKey) routeChildren {
	return routeChildren{
		requests: m.requests.WithLabelValues(k.method, k.route, strconv.Itoa(k.code)),
		duration: m.duration.WithLabelValues(k.method, k.route),
	}
}

// newRequestMetrics registers the metrics with reg, which must not be nil.
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

// routePattern is the chi route pattern the request matched, known only
// after routing; UnmatchedRoute when the router's 404 or 405 answered.
func routePattern(st *requestState) string {
	if st.unmatched || st.routing == nil {
		return UnmatchedRoute
	}
	if p := joinedPattern(st.routing); p != "" {
		return p
	}
	return UnmatchedRoute
}

// joinedPattern is rc.RoutePattern(), which joins the patterns of each
// router the request went through and takes the wildcards of mount points
// out. A request routed by one router whose pattern has no wildcard to
// take out and no trailing slash (most of them: "/payments/{id}") is its
// pattern as it is: chi's join, replace and trims cost ~300 instructions
// per request for nothing then. TestJoinedPattern_AsChi checks it against
// chi's.
func joinedPattern(rc *chi.Context) string {
	if len(rc.RoutePatterns) == 1 {
		if p := rc.RoutePatterns[0]; !hasMountWildcard(p) && (p == "/" || !strings.HasSuffix(p, "/")) {
			return p
		}
	}
	return rc.RoutePattern()
}

// hasMountWildcard reports whether p contains "/*/".
func hasMountWildcard(p string) bool {
	for i := 0; i+2 < len(p); i++ {
		if p[i] == '/' && p[i+1] == '*' && p[i+2] == '/' {
			return true
		}
	}
	return false
}

// front is the router's first middleware, in one request copy and one
// response-writer wrap: the request id (X-Request-Id, taken or made), the
// SERVER span (when the app has a TracerProvider; not for probes), the error
// chain and the router's ContextValues in one context node, and after the
// handler the span's route, status and name, the route metrics and the
// access log. Probes are logged at debug.
//
// The span's request attributes are built only when the span records (it
// is sampled): an unsampled request pays for its ids and nothing else.
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

// serverKind is the SERVER span's start options, as a slice made once: a
// variadic argument list passed to an interface method (Tracer.Start) is
// allocated on every call, one allocation per request.
var serverKind = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer)}

// TracerName is the instrumentation scope of the SERVER spans (every other
// span redisfx makes has plugintrace.ScopeName).
const TracerName = "github.com/redisfx/redisfx/httpfx"

func (f *front) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	// The root router's routing context, which every router the request
	// goes through fills (sub-routers share it): read here, one node
	// up, rather than through the whole context chain after the handler.
	state := &requestState{errors: f.errors, values: f.values, routing: chi.RouteContext(r.Context())}
	var id string
	if v := r.Header[RequestIDHeader]; len(v) > 0 { // canonical: no Get, which canonicalises the name each time
		id = v[0]
	}
	if !validRequestID(id) {
		id = state.newRequestID()
	}
	state.id, state.idHeader[0] = id, id
	w.Header()[RequestIDHeader] = state.idHeader[:] // canonical already: no Set
	ctx := r.Context()
	probe := isProbe(r)
	var span trace.Span
	if f.tracer != nil && !probe {
		prop := f.propagator
		if prop == nil {
			prop = otel.GetTextMapPropagator()
		}
		ctx = prop.Extract(ctx, requestCarrier(r.Header))
		ctx, span = f.tracer.Start(ctx, spanMethod(r.Method), serverKind...)
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
		// http.ErrAbortHandler, the one panic the recovery lets through:
		// net/http closes the connection without an answer, and the
		// request is logged and counted as a 500. Else runtime.Goexit,
		// which the recovery answered or marked aborted.
		if p := recover(); p != nil {
			state.aborted = true
			f.observe(ctx, r, state, span, probe, began)
			panic(p)
		}
		f.observe(ctx, r, state, span, probe, began)
	}()
	next.ServeHTTP(ww, r)
	returned = true
	f.observe(ctx, r, state, span, probe, began)
}

// observe records a request once its handler is done: the SERVER span's
// route, status and size, the route metrics and the access log line. An
// aborted request counts as a 500 (no complete answer went out; the
// client's library reports an error), its log line marked aborted.
func (f *front) observe(ctx context.Context, r *http.Request, state *requestState, span trace.Span, probe bool, began time.Time) {
	metrics := responseMetrics{Code: state.writer.code, Written: int64(state.writer.bytes), Duration: time.Since(began)}
	if r.Method == http.MethodHead {
		metrics.Written = 0 // net/http takes a HEAD answer's body and sends none of it
	}
	switch {
	case state.aborted:
		metrics.Code = http.StatusInternalServerError
	case metrics.Code == 0 && r.Context().Err() != nil: // nothing written, and nobody waits
		metrics.Code = StatusClientClosedRequest
	case metrics.Code == 0: // nothing written: net/http sends 200
		metrics.Code = http.StatusOK
	}
	route := routePattern(state)
	if span != nil && span.IsRecording() {
		attrs := make([]attribute.KeyValue, 0, 3)
		if route != UnmatchedRoute {
			span.SetName(spanMethod(r.Method) + " " + route)
			attrs = append(attrs, semconv.HTTPRoute(route))
		}
		attrs = append(attrs, semconv.HTTPResponseStatusCode(metrics.Code), semconv.HTTPResponseBodySize(int(metrics.Written)))
		span.SetAttributes(attrs...)
		if metrics.Code >= http.StatusInternalServerError {
			span.SetStatus(codes.Error, "")
		}
	}
	if f.metrics != nil {
		f.metrics.observe(methodLabel(r.Method), route, metrics.Code, metrics.Duration)
	}
	level := zap.InfoLevel
	if probe {
		level = zap.DebugLevel // polled every few seconds: below the app's info lines
	}
	if ce := f.log.Check(level, "request"); ce != nil {
		fields := []zap.Field{
			zap.String("method", r.Method), zap.String("route", route), zap.String("path", r.URL.Path),
			zap.Int("status", metrics.Code), zap.Duration("duration", metrics.Duration),
			zap.Int64("bytes", metrics.Written), zap.String("request_id", state.id),
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

// responseMetrics is what the front middleware measured of a response.
type responseMetrics struct {
	Code     int
	Written  int64
	Duration time.Duration
}

// requestAttributes are the SERVER span's request attributes (OpenTelemetry
// HTTP semantic conventions), built only for a recording span.
func requestAttributes(r *http.Request) []attribute.KeyValue {
	attrs := make([]attribute.KeyValue, 0, 12)
	method, known := r.Method, knownMethod(r.Method)
	if !known {
		method = "_OTHER"
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
		if fwd := headerValue(r.Header, "X-Forwarded-For"); fwd != "" {
			if i := strings.IndexByte(fwd, ','); i >= 0 {
				fwd = fwd[:i]
			}
			client = strings.TrimSpace(fwd)
		}
		attrs = append(attrs, semconv.ClientAddress(client))
	}
	if ua := headerValue(r.Header, "User-Agent"); ua != "" {
		attrs = append(attrs, semconv.UserAgentOriginal(ua))
	}
	if r.ProtoMajor > 0 {
		attrs = append(attrs, semconv.NetworkProtocolVersion(protocolVersion(r.ProtoMajor, r.ProtoMinor)))
	}
	return attrs
}

// headerValue is h.Get(name) for a name already in canonical form, which
// Get would canonicalise again (~400 instructions each).
func headerValue(h http.Header, name string) string {
	if v := h[name]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// protocolVersion is network.protocol.version: "1.1", "1.0", "2", "3", as
// constants for the versions net/http serves, where the concatenation
// allocated on every sampled request.
func protocolVersion(major, minor int) string {
	switch {
	case major == 1 && minor == 1:
		return "1.1"
	case major == 1 && minor == 0:
		return "1.0"
	case major == 2:
		return "2"
	case major == 3:
		return "3"
	case major == 1:
		return "1." + strconv.Itoa(minor)
	}
	return strconv.Itoa(major)
}

// methodLabel is the method as a metric label: a method HTTP does not
// define is "_OTHER" (OpenTelemetry's rule), so a client sending made-up
// methods cannot grow the metrics' cardinality.
func methodLabel(m string) string {
	if knownMethod(m) {
		return m
	}
	return "_OTHER"
}

// spanMethod is the method in a SERVER span's name: "HTTP" for a method
// HTTP does not define (OpenTelemetry's HTTP conventions), so made-up
// methods cannot flood a tracing backend's list of operations; the method
// itself is in http.request.method_original.
func spanMethod(m string) string {
	if knownMethod(m) {
		return m
	}
	return "HTTP"
}

// knownMethod reports whether HTTP defines m (RFC 9110 and PATCH). A switch,
// not a map: asked two or three times per request, where a map lookup
// hashes the method each time (~100 instructions against ~15).
func knownMethod(m string) bool {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace:
		return true
	}
	return false
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
