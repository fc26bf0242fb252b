package tracingfx

import (
	"cmp"
	"context"
	"errors"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/redisfx/redisfx/internal/handshake"
	"github.com/redisfx/redisfx/plugintrace"
	"github.com/redisfx/redisfx/storefx"
)

// Attribute keys semconv does not define: the older db.operation and
// db.statement that dashboards still read, and the opt-in args and result.
const (
	dbOperationKey       = attribute.Key("db.operation")
	dbStatementKey       = attribute.Key("db.statement")
	dbStatementArgsKey   = attribute.Key("db.statement.args")
	dbStatementResultKey = attribute.Key("db.statement.result")
)

// bookkeeping commands are what a Cluster client sends on its own to learn
// the slot map and the command table. Without a parent span they are the
// client's, not the app's, and make no span (they are counted).
var bookkeeping = map[string]bool{"cluster": true, "command": true}

// commandHook traces and measures the commands of one server: a standalone
// or Sentinel-managed client, or one node of a Cluster client.
type commandHook struct {
	tracer  trace.Tracer // nil: no spans
	metrics *CommandMetrics
	spans   SpanConfig
	exclude map[string]bool
	// base are the constant attributes of every span of this hook.
	base []attribute.KeyValue
	// server is server.address and server.port of the master a Sentinel
	// client last connected to (nil otherwise: they are in base).
	server atomic.Pointer[[]attribute.KeyValue]
	// clusterNode: the hook sees a Cluster client's bookkeeping.
	clusterNode bool
	// followMaster: the hook learns the server from each new connection.
	followMaster bool
	// dropsChildren: tracer's sampler drops the children of a local span
	// that is neither sampled nor recorded, so none is started: the
	// unsampled requests, most of them, cost no span per command.
	dropsChildren bool
}

// Instrumentation returns the storefx instrumentation that adds command
// spans (tp non-nil) and command metrics (metrics non-nil) to every
// client, one hook per server so that every span names its node.
func Instrumentation(tp trace.TracerProvider, spans SpanConfig, metrics *CommandMetrics) storefx.Instrumentation {
	return instrumentation(tp, spans, metrics, false)
}

func instrumentation(tp trace.TracerProvider, spans SpanConfig, metrics *CommandMetrics, dropsChildren bool) storefx.Instrumentation {
	exclude := map[string]bool{}
	for _, c := range spans.ExcludeCommands {
		exclude[strings.ToLower(c)] = true
	}
	spans.MaxArgLength = cmp.Or(max(spans.MaxArgLength, 0), 256)
	return func(ci storefx.ClientInfo) redis.Hook {
		if tp == nil && metrics == nil {
			return nil
		}
		h := &commandHook{metrics: metrics, spans: spans, exclude: exclude, clusterNode: ci.Cluster, followMaster: ci.Node == "", dropsChildren: dropsChildren,
			base: append(slices.Clone(plugintrace.DBSystem), plugintrace.Client.String(ci.Name), semconv.DBNamespace(strconv.Itoa(ci.DB)))}
		if tp != nil {
			h.tracer = tp.Tracer(plugintrace.ScopeName)
		}
		if ci.Node != "" {
			h.base = append(h.base, serverAttributes(ci.Network, ci.Node)...)
		}
		return h
	}
}

// serverAttributes are server.address and server.port of addr (a socket
// path over unix, which has no port).
func serverAttributes(network, addr string) []attribute.KeyValue {
	host, port, err := net.SplitHostPort(addr)
	if network == "unix" || err != nil {
		return []attribute.KeyValue{semconv.ServerAddress(addr)}
	}
	kv := []attribute.KeyValue{semconv.ServerAddress(host)}
	if p, err := strconv.Atoi(port); err == nil {
		kv = append(kv, semconv.ServerPort(p))
	}
	return kv
}

// DialHook implements redis.Hook: a Sentinel client's hook learns the
// address of the master from each new connection.
func (h *commandHook) DialHook(next redis.DialHook) redis.DialHook {
	if !h.followMaster || h.tracer == nil {
		return next
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		if err == nil && conn.RemoteAddr() != nil {
			kv := serverAttributes(conn.RemoteAddr().Network(), conn.RemoteAddr().String())
			h.server.Store(&kv)
		}
		return conn, err
	}
}

func (h *commandHook) traced(ctx context.Context, name string) bool {
	if h.tracer == nil {
		return false
	}
	parent := trace.SpanFromContext(ctx)
	sc := parent.SpanContext()
	if h.dropsChildren && sc.IsValid() && !sc.IsRemote() && !sc.IsSampled() && !parent.IsRecording() ||
		plugintrace.CommandSpansSuppressed(ctx) {
		return false
	}
	return !h.clusterNode || !bookkeeping[name] || sc.IsValid()
}

// ProcessHook implements redis.Hook.
func (h *commandHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		name := cmd.Name()
		if handshake.Command(name, cmd.Args()) { // no span, no metric: noise, and AUTH and HELLO carry credentials
			return next(ctx, cmd)
		}
		var span trace.Span
		var names commandName
		// An excluded command gets no span but is still measured: the
		// exclusion is about trace volume, not about the metrics and alerts.
		if !h.exclude[name] && h.traced(ctx, name) {
			names = commandNames(name, cmd.Args())
			ctx, span = h.tracer.Start(ctx, names.span, clientKind...)
		}
		began := time.Now()
		err := next(ctx, cmd)
		took := time.Since(began)
		out := outcomeOf(err)
		h.measure(name, took, out.failed)
		if span == nil {
			return err
		}
		if span.IsRecording() {
			h.describe(span, names.operation, h.statement(names.operation, cmd), took)
			if h.showsArgs(cmd) {
				span.SetAttributes(dbStatementArgsKey.String(h.cut(joinArgs(cmd.Args()[1:]))))
			}
			if h.spans.IncludeResult && !credentialCommands[name] && err == nil {
				span.SetAttributes(dbStatementResultKey.String(h.cut(resultString(cmd))))
			}
			h.record(span, out, err, cmd)
		}
		span.End()
		return err
	}
}

// ProcessPipelineHook implements redis.Hook.
func (h *commandHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) == 0 || handshake.Pipeline(cmds) {
			return next(ctx, cmds)
		}
		op := "PIPELINE"
		if isTransaction(cmds) {
			op = "MULTI"
		}
		var span trace.Span
		if h.traced(ctx, "") {
			ctx, span = h.tracer.Start(ctx, "redis."+op, clientKind...)
		}
		began := time.Now()
		err := next(ctx, cmds)
		took := time.Since(began)
		out, cause, culprits := outcomeOf(err), err, cmds
		for _, c := range cmds {
			cout := outcomeOf(c.Err())
			h.measure(c.Name(), took, cout.failed)
			if cout.failed && !out.failed {
				out, cause, culprits = cout, c.Err(), []redis.Cmder{c}
			}
		}
		if span == nil {
			return err
		}
		if span.IsRecording() {
			stmt, batch := h.pipelineStatement(cmds)
			h.describe(span, op, stmt, took, semconv.DBOperationBatchSize(batch))
			h.record(span, out, cause, culprits...)
		}
		span.End()
		return err
	}
}

func (h *commandHook) describe(span trace.Span, op, stmt string, took time.Duration, extra ...attribute.KeyValue) {
	buf, _ := attrBuffers.Get().(*[]attribute.KeyValue) // New makes one when the pool is empty
	attrs := append(*buf, h.base...)
	if server := h.server.Load(); server != nil {
		attrs = append(attrs, *server...)
	}
	attrs = append(attrs, dbOperationKey.String(op), semconv.DBOperationName(op), dbStatementKey.String(stmt),
		plugintrace.DurationMS.Float64(float64(took.Microseconds())/1000))
	attrs = append(attrs, extra...)
	span.SetAttributes(attrs...)
	putAttrs(buf, attrs)
}

// pipelineStatement is a pipeline's statement, one line per command, and
// its batch size without MULTI and EXEC.
func (h *commandHook) pipelineStatement(cmds []redis.Cmder) (string, int) {
	stmts := make([]string, len(cmds))
	batch := 0
	for i, c := range cmds {
		stmts[i] = h.statement(commandNames(c.Name(), c.Args()).operation, c)
		if !wrapper[c.Name()] {
			batch++
		}
	}
	return strings.Join(stmts, "\n"), batch
}

// attrBuffers recycles the attribute slices of command spans: the SDK
// copies the attributes it is given, so a slice is free again as soon as
// SetAttributes returns.
var attrBuffers = sync.Pool{New: func() any {
	b := make([]attribute.KeyValue, 0, 16)
	return &b
}}

// putAttrs returns buf, grown to used, to the pool, without the references
// it held.
func putAttrs(buf *[]attribute.KeyValue, used []attribute.KeyValue) {
	clear(used)
	*buf = used[:0]
	attrBuffers.Put(buf)
}

// wrapper commands frame a batch; they are not counted in its size.
var wrapper = map[string]bool{"multi": true, "exec": true, "asking": true}

// isTransaction: a MULTI … EXEC batch, with ASKING before it on a
// redirected Cluster transaction.
func isTransaction(cmds []redis.Cmder) bool {
	return slices.ContainsFunc(cmds[:min(2, len(cmds))], func(c redis.Cmder) bool { return c.Name() == "multi" })
}

// clientKind is the command spans' start options, as a slice made once: a
// variadic argument list passed to an interface method (Tracer.Start) is
// allocated on every call.
var clientKind = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient)}

// outcome is what a command's error means for its span and the metrics.
type outcome struct {
	// failed: the command failed. redis.Nil (no such key) is an answer, not
	// a failure; a MOVED or ASK redirect is not one either, because the
	// Cluster client sends the command again to the node it names.
	failed bool
	// status is the Redis error prefix (ERR, WRONGTYPE, NOSCRIPT …), the
	// db.response.status_code; "" when the error does not come from Redis.
	status string
}

func outcomeOf(err error) outcome {
	if err == nil || errors.Is(err, redis.Nil) {
		return outcome{}
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		status := errorPrefix(rerr.Error())
		if status == "MOVED" || status == "ASK" {
			return outcome{status: status}
		}
		return outcome{failed: true, status: status}
	}
	return outcome{failed: true}
}

// record sets the outcome's attributes on span, and its error on a failure.
func (h *commandHook) record(span trace.Span, o outcome, err error, cmds ...redis.Cmder) {
	o.status = errorCode(o.status, cmds)
	if o.status != "" {
		span.SetAttributes(semconv.DBResponseStatusCode(o.status))
	}
	if !o.failed {
		return
	}
	text := h.errorText(err, o.status, cmds...)
	span.AddEvent(semconv.ExceptionEventName, trace.WithAttributes(
		semconv.ExceptionTypeKey.String(typeName(err)), semconv.ExceptionMessageKey.String(text)))
	span.SetStatus(codes.Error, text)
	span.SetAttributes(semconv.ErrorTypeKey.String(errorType(err, o.status)), plugintrace.Error.Bool(true))
}

// errorPrefix is the first word of a Redis error when it is an upper-case
// code ("WRONGTYPE Operation against a key …" → WRONGTYPE), else "".
func errorPrefix(msg string) string {
	word, _, _ := strings.Cut(msg, " ")
	if word == "" || strings.Trim(word, "ABCDEFGHIJKLMNOPQRSTUVWXYZ_") != "" {
		return ""
	}
	return word
}

// errorType is the low-cardinality error.type of a failure.
func errorType(err error, status string) string {
	if status != "" {
		return status
	}
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	}
	return semconv.ErrorType(err).Value.AsString()
}
