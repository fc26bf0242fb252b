package tracingfx

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/redisfx/redisfx/storefx"
)

// Attribute names of command and plugin spans.
const (
	AttrClient     = "redisfx.client"
	AttrDurationMS = "redisfx.duration_ms"
	AttrError      = "redisfx.error"
	AttrPlugin     = "redisfx.plugin"
)

// handshake commands are sent by go-redis when it opens a connection. They
// make no spans and no metrics: they are noise, and AUTH and HELLO carry
// credentials.
var handshake = map[string]bool{"hello": true, "auth": true, "select": true, "readonly": true, "client": true}

// CommandMetrics are the Redis command metrics, measured in the same hook
// as the command spans (one clock reading for both).
type CommandMetrics struct {
	commands *prometheus.CounterVec
	duration *prometheus.HistogramVec
	errors   prometheus.Counter
}

// NewCommandMetrics registers commands_total{command},
// command_duration_seconds{command} and errors_total with reg (nil: none).
func NewCommandMetrics(reg prometheus.Registerer) (*CommandMetrics, error) {
	if reg == nil {
		return nil, nil
	}
	m := &CommandMetrics{
		commands: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "commands_total",
			Help: "Redis commands executed, by command name."}, []string{"command"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "command_duration_seconds",
			Help:    "Redis command latency, by command name.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1}}, []string{"command"}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{Name: "errors_total",
			Help: "Redis commands that failed (redis.Nil is not a failure)."}),
	}
	for _, c := range []prometheus.Collector{m.commands, m.duration, m.errors} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// commandHook traces and measures every command of one client.
type commandHook struct {
	tracer  trace.Tracer // nil: no spans
	metrics *CommandMetrics
	spans   SpanConfig
	exclude map[string]bool
	base    []attribute.KeyValue // constant attributes of this client
}

// Instrumentation returns the storefx instrumentation that adds command
// spans (tracer non-nil) and command metrics (metrics non-nil) to every
// client.
func Instrumentation(tp trace.TracerProvider, spans SpanConfig, metrics *CommandMetrics) storefx.Instrumentation {
	exclude := map[string]bool{}
	for _, c := range spans.ExcludeCommands {
		exclude[strings.ToLower(c)] = true
	}
	if spans.MaxArgLength == 0 {
		spans.MaxArgLength = 256
	}
	return func(ci storefx.ClientInfo) redis.Hook {
		if tp == nil && metrics == nil {
			return nil
		}
		h := &commandHook{metrics: metrics, spans: spans, exclude: exclude}
		if tp != nil {
			h.tracer = tp.Tracer("github.com/redisfx/redisfx/tracingfx")
		}
		h.base = []attribute.KeyValue{
			attribute.String("db.system", "redis"), attribute.String("db.system.name", "redis"),
			attribute.String(AttrClient, ci.Name),
		}
		if len(ci.Addrs) > 0 {
			if host, port, err := net.SplitHostPort(ci.Addrs[0]); err == nil {
				h.base = append(h.base, attribute.String("server.address", host))
				if p, err := strconv.Atoi(port); err == nil {
					h.base = append(h.base, attribute.Int("server.port", p))
				}
			} else {
				h.base = append(h.base, attribute.String("server.address", ci.Addrs[0]))
			}
		}
		return h
	}
}

// DialHook implements redis.Hook.
func (h *commandHook) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements redis.Hook.
func (h *commandHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		name := cmd.Name()
		if handshake[name] || h.exclude[name] {
			return next(ctx, cmd)
		}
		upper, spanName := commandNames(name)
		var span trace.Span
		if h.tracer != nil {
			ctx, span = h.tracer.Start(ctx, spanName, clientKind)
		}
		began := time.Now()
		err := next(ctx, cmd)
		took := time.Since(began)
		failed := err != nil && !errors.Is(err, redis.Nil)
		h.measure(name, took, failed)
		if span != nil && span.IsRecording() {
			attrs := append(h.base[:len(h.base):len(h.base)],
				attribute.String("db.operation", upper), attribute.String("db.operation.name", upper),
				attribute.String("db.statement", h.statement(upper, cmd.Args())),
				attribute.Float64(AttrDurationMS, float64(took.Microseconds())/1000))
			if h.spans.IncludeArgs {
				attrs = append(attrs, attribute.String("db.statement.args", h.cut(joinArgs(cmd.Args()[1:]))))
			}
			if h.spans.IncludeResult && err == nil {
				attrs = append(attrs, attribute.String("db.statement.result", h.cut(resultString(cmd))))
			}
			span.SetAttributes(attrs...)
			endSpan(span, err, failed)
		} else if span != nil {
			span.End()
		}
		return err
	}
}

// ProcessPipelineHook implements redis.Hook.
func (h *commandHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) == 0 || handshake[cmds[0].Name()] {
			return next(ctx, cmds)
		}
		op := "PIPELINE"
		if cmds[0].Name() == "multi" {
			op = "MULTI"
		}
		var span trace.Span
		if h.tracer != nil {
			ctx, span = h.tracer.Start(ctx, "redis."+op, trace.WithSpanKind(trace.SpanKindClient))
		}
		began := time.Now()
		err := next(ctx, cmds)
		took := time.Since(began)
		failed := false
		for _, c := range cmds {
			cerr := c.Err()
			bad := cerr != nil && !errors.Is(cerr, redis.Nil)
			failed = failed || bad
			h.measure(c.Name(), took, bad)
		}
		if span != nil && span.IsRecording() {
			stmts := make([]string, 0, len(cmds))
			for _, c := range cmds {
				stmts = append(stmts, h.statement(strings.ToUpper(c.Name()), c.Args()))
			}
			attrs := append(h.base[:len(h.base):len(h.base)],
				attribute.String("db.operation", op), attribute.String("db.operation.name", op),
				attribute.Int("db.operation.batch.size", len(cmds)),
				attribute.String("db.statement", strings.Join(stmts, "\n")),
				attribute.Float64(AttrDurationMS, float64(took.Microseconds())/1000))
			span.SetAttributes(attrs...)
			if err == nil && failed {
				err = errors.New("a command of the pipeline failed")
			}
			endSpan(span, err, failed || (err != nil && !errors.Is(err, redis.Nil)))
		} else if span != nil {
			span.End()
		}
		return err
	}
}

var clientKind = trace.WithSpanKind(trace.SpanKindClient)

// commandNames returns the upper-case name and the span name of a command,
// precomputed for known commands so the hot path allocates neither.
func commandNames(name string) (upper, span string) {
	if n, ok := spanNames[name]; ok {
		return n.upper, n.span
	}
	upper = strings.ToUpper(name)
	return upper, "redis." + upper
}

var spanNames = func() map[string]struct{ upper, span string } {
	m := make(map[string]struct{ upper, span string }, len(commandLabels))
	for c, up := range commandLabels {
		m[c] = struct{ upper, span string }{up, "redis." + up}
	}
	return m
}()

func (h *commandHook) measure(name string, took time.Duration, failed bool) {
	if h.metrics == nil {
		return
	}
	label := commandLabel(name)
	h.metrics.commands.WithLabelValues(label).Inc()
	h.metrics.duration.WithLabelValues(label).Observe(took.Seconds())
	if failed {
		h.metrics.errors.Inc()
	}
}

func endSpan(span trace.Span, err error, failed bool) {
	if failed {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		span.SetAttributes(attribute.Bool(AttrError, true))
	}
	span.End()
}

// statement is the command with every argument replaced by "?", or with
// the arguments (cut) when IncludeArgs is on.
func (h *commandHook) statement(name string, args []any) string {
	if len(args) <= 1 {
		return name
	}
	if h.spans.IncludeArgs {
		return h.cut(name + " " + joinArgs(args[1:]))
	}
	var b strings.Builder
	b.Grow(len(name) + 2*len(args))
	b.WriteString(name)
	for range args[1:] {
		b.WriteString(" ?")
	}
	return b.String()
}

func (h *commandHook) cut(s string) string {
	if len(s) > h.spans.MaxArgLength {
		return s[:h.spans.MaxArgLength]
	}
	return s
}

func joinArgs(args []any) string {
	parts := make([]string, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case string:
			parts[i] = v
		case []byte:
			parts[i] = string(v)
		default:
			parts[i] = toString(v)
		}
	}
	return strings.Join(parts, " ")
}

func toString(v any) string {
	switch x := v.(type) {
	case int:
		return strconv.Itoa(x)
	case int64:
		return strconv.FormatInt(x, 10)
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	case time.Duration:
		return x.String()
	case bool:
		return strconv.FormatBool(x)
	}
	return strings.TrimSpace(strings.ReplaceAll(strings.ReplaceAll(fmtAny(v), "\n", " "), "\r", " "))
}

func resultString(cmd redis.Cmder) string {
	s := cmd.String() // "get key: value"
	if i := strings.Index(s, ": "); i >= 0 {
		return s[i+2:]
	}
	return s
}
