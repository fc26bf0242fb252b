package main

import (
	"context"
	"errors"
	"log"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/redisfx/redisfx/bench/internal/protocol"
	"github.com/redisfx/redisfx/idempotencyfx"
)

// The SDK floor: the limit's protocol round trips on bare net/http, traced
// with nothing but the OpenTelemetry SDK, as a team would write it by hand
// with no wrapper in between: sdktrace's TracerProvider with
// ParentBased(TraceIDRatioBased(0.1)), otlptracehttp's exporter behind the
// batch processor (its endpoint from OTEL_EXPORTER_OTLP_ENDPOINT, read by
// the exporter), the W3C TraceContext propagator, a SERVER span per request
// and a CLIENT span per Redis command from a go-redis hook. The spans have
// the names, kinds and attribute keys of the README stack's (bench/run
// prints both), so the difference between the stack's tracing cost and
// this one's is what tracingfx adds over the SDK.
//
// Mode "nethttp" is the same server untraced: the floor's baseline.

// floorRatio is the floor's sampling ratio, the stack-otlp10 row's.
const floorRatio = 0.1

// floorHandler is the nethttp server's handler (traced false) or the SDK
// floor's (traced true), and what stops it (flushing the spans).
func floorHandler(opts *redis.Options, prefix string, traced bool) (http.Handler, func()) {
	opts.DisableIdentity = true
	rdb := redis.NewClient(opts)
	var outcome func(*http.Request, idempotencyfx.Outcome)
	stop := func() { _ = rdb.Close() }
	h := http.Handler(http.HandlerFunc(protocol.Payment))
	if traced {
		exp, err := otlptracehttp.New(context.Background())
		if err != nil {
			log.Fatal(err)
		}
		tp := sdktrace.NewTracerProvider(sdktrace.WithResource(resource.Default()),
			sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(floorRatio))),
			sdktrace.WithBatcher(exp))
		stop = func() { _ = tp.Shutdown(context.Background()); _ = rdb.Close() }
		host, port, _ := net.SplitHostPort(opts.Addr)
		p, _ := strconv.Atoi(port)
		rdb.AddHook(&floorHook{tracer: tp.Tracer("github.com/redisfx/redisfx"), base: []attribute.KeyValue{
			semconv.DBSystemNameRedis, attribute.String("db.system", "redis"), attribute.String("redisfx.client", "default"),
			semconv.DBNamespace(strconv.Itoa(opts.DB)), semconv.ServerAddress(host), semconv.ServerPort(p)}})
		outcome = func(r *http.Request, o idempotencyfx.Outcome) {
			if span := trace.SpanFromContext(r.Context()); span.IsRecording() {
				span.SetAttributes(attribute.String(idempotencyfx.AttrOutcome, string(o)))
			}
		}
		h = floorServer(tp.Tracer("github.com/redisfx/redisfx/httpfx"), propagation.TraceContext{}, "/payments",
			protocol.Limit(rdb, prefix, outcome)(h))
	} else {
		h = protocol.Limit(rdb, prefix, nil)(h)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /payments", h)
	return mux, stop
}

// The spans' start options, made once: a variadic list passed to
// Tracer.Start is allocated per call.
var (
	serverStart = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer)}
	clientStart = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient)}
)

// floorServer makes the SERVER span of the POST requests of route, the
// only method it is mounted for.
func floorServer(tracer trace.Tracer, prop propagation.TextMapPropagator, route string, next http.Handler) http.Handler {
	name := http.MethodPost + " " + route
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		ctx, span := tracer.Start(ctx, name, serverStart...)
		defer span.End()
		if !span.IsRecording() {
			next.ServeHTTP(w, r.WithContext(ctx))
			return
		}
		attrs := []attribute.KeyValue{semconv.HTTPRequestMethodKey.String(r.Method), semconv.URLScheme("http"),
			semconv.URLPath(r.URL.Path), semconv.HTTPRoute(route), semconv.NetworkProtocolVersion("1.1"),
			semconv.UserAgentOriginal(r.UserAgent())}
		if host, port, err := net.SplitHostPort(r.Host); err == nil {
			p, _ := strconv.Atoi(port)
			attrs = append(attrs, semconv.ServerAddress(host), semconv.ServerPort(p))
		}
		if peer, port, err := net.SplitHostPort(r.RemoteAddr); err == nil {
			p, _ := strconv.Atoi(port)
			attrs = append(attrs, semconv.NetworkPeerAddress(peer), semconv.NetworkPeerPort(p), semconv.ClientAddress(peer))
		}
		span.SetAttributes(attrs...)
		rw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		next.ServeHTTP(rw, r.WithContext(ctx))
		span.SetAttributes(semconv.HTTPResponseStatusCode(rw.code), semconv.HTTPResponseBodySize(rw.bytes))
		if rw.code >= http.StatusInternalServerError {
			span.SetStatus(codes.Error, "")
		}
	})
}

// statusWriter keeps the status and the size of a response.
type statusWriter struct {
	http.ResponseWriter
	code, bytes int
}

func (w *statusWriter) WriteHeader(code int) { w.code = code; w.ResponseWriter.WriteHeader(code) }

func (w *statusWriter) Write(b []byte) (int, error) {
	n, err := w.ResponseWriter.Write(b)
	w.bytes += n
	return n, err
}

var (
	handshake = map[string]bool{"hello": true, "client": true, "auth": true, "select": true}
	// commands names the commands of the request path without allocating.
	commands = map[string]struct{ op, span string }{"evalsha": {"EVALSHA", "redis.EVALSHA"}, "eval": {"EVAL", "redis.EVAL"}}
)

// floorHook makes a CLIENT span per Redis command, with the attributes of
// tracingfx's command spans.
type floorHook struct {
	tracer trace.Tracer
	base   []attribute.KeyValue
}

func (h *floorHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *floorHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		name := cmd.Name()
		if handshake[name] { // a new connection's, as tracingfx skips them
			return next(ctx, cmd)
		}
		n, ok := commands[name]
		if !ok {
			n.op = strings.ToUpper(name)
			n.span = "redis." + n.op
		}
		op := n.op
		ctx, span := h.tracer.Start(ctx, n.span, clientStart...)
		began := time.Now()
		err := next(ctx, cmd)
		if span.IsRecording() {
			stmt := op + strings.Repeat(" ?", len(cmd.Args())-1)
			span.SetAttributes(h.base...)
			span.SetAttributes(attribute.String("db.operation", op), semconv.DBOperationName(op), attribute.String("db.statement", stmt),
				attribute.Float64("redisfx.duration_ms", float64(time.Since(began).Microseconds())/1000))
			if err != nil && !errors.Is(err, redis.Nil) {
				span.SetStatus(codes.Error, err.Error())
			}
		}
		span.End()
		return err
	}
}

func (h *floorHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
