package tracingfx

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/redisfx/redisfx/plugintrace"
)

// TracingServiceName is the Fx name of the tracing service (see ITracingService).
const TracingServiceName = "TRACING_SERVICE"

// SpanKind is the kind of a span: INTERNAL, CLIENT, SERVER, PRODUCER or CONSUMER.
type SpanKind string

// Span kinds.
const (
	KindInternal SpanKind = "INTERNAL"
	KindClient   SpanKind = "CLIENT"
	KindServer   SpanKind = "SERVER"
	KindProducer SpanKind = "PRODUCER"
	KindConsumer SpanKind = "CONSUMER"
)

// SpanStatus is OK or ERROR.
type SpanStatus string

// Span statuses.
const (
	StatusOK    SpanStatus = "OK"
	StatusError SpanStatus = "ERROR"
)

// ISpanOptions are the options of a custom span. Kind defaults to CLIENT.
// Several options combine: the last Kind that is set wins, and the
// attributes of all of them are set, a later value winning for the same key.
type ISpanOptions struct {
	Kind       SpanKind
	Attributes map[string]any
}

// ISpan is a custom span.
type ISpan interface {
	SetAttribute(key string, value any)
	SetAttributes(attrs map[string]any)
	AddEvent(name string, attrs map[string]any)
	SetStatus(status SpanStatus, message string)
	RecordException(err error)
	End()
	// SpanContext identifies the span (trace id, span id).
	SpanContext() trace.SpanContext
}

// ITracingService makes the application's own spans. Module provides it
// under the Fx name TRACING_SERVICE, so a service receives it with the
// name tag in its parameter struct:
//
//	type Params struct {
//		fx.In
//		Tracer tracingfx.ITracingService `name:"TRACING_SERVICE"`
//	}
//
// Without the tag, Fx reports "missing type: tracingfx.ITracingService".
// The active span travels in the context.Context, as Go does it.
type ITracingService interface {
	// WithSpan runs fn in a child span of ctx's span, then ends it: status OK
	// when fn returns nil; ERROR with the exception recorded when it returns
	// an error or panics (the panic is re-raised).
	WithSpan(ctx context.Context, name string, fn func(ctx context.Context) error, opts ...ISpanOptions) error
	// StartSpan starts a child span; the caller must End it, also on errors.
	StartSpan(ctx context.Context, name string, opts ...ISpanOptions) (context.Context, ISpan)
	// GetCurrentSpan returns the span in ctx, or nil if there is none.
	GetCurrentSpan(ctx context.Context) ISpan
	// SetAttribute sets an attribute on the current span.
	SetAttribute(ctx context.Context, key string, value any)
	// AddEvent adds an event to the current span.
	AddEvent(ctx context.Context, name string, attrs map[string]any)
	// RecordException records err (type, message, stack trace, time) on the
	// current span.
	RecordException(ctx context.Context, err error)
}

// WithSpanResult is WithSpan for a function that returns a value.
func WithSpanResult[T any](ctx context.Context, svc ITracingService, name string, fn func(ctx context.Context) (T, error), opts ...ISpanOptions) (T, error) {
	var out T
	err := svc.WithSpan(ctx, name, func(ctx context.Context) error {
		var err error
		out, err = fn(ctx)
		return err
	}, opts...)
	return out, err
}

// TracingService implements ITracingService on a TracerProvider.
type TracingService struct {
	tracer trace.Tracer
}

// NewTracingService returns the tracing service of tp.
func NewTracingService(tp trace.TracerProvider) *TracingService {
	return &TracingService{tracer: tp.Tracer(plugintrace.ScopeName)}
}

// WithSpan implements ITracingService. However fn leaves (return, error,
// panic, runtime.Goexit), the span ends with its status.
func (s *TracingService) WithSpan(ctx context.Context, name string, fn func(ctx context.Context) error, opts ...ISpanOptions) (err error) {
	ctx, sp := s.StartSpan(ctx, name, opts...)
	returned := false
	defer func() {
		p := recover()
		switch {
		case p != nil:
			err, _ = p.(error)
			if err == nil {
				err = fmt.Errorf("panic: %v", p)
			}
		case !returned:
			err = errors.New("runtime.Goexit: the function did not return")
		}
		if err != nil {
			sp.RecordException(err)
			sp.SetStatus(StatusError, err.Error())
		} else {
			sp.SetStatus(StatusOK, "")
		}
		sp.End()
		if p != nil {
			panic(p)
		}
	}()
	err = fn(ctx)
	returned = true
	return err
}

// StartSpan implements ITracingService.
func (s *TracingService) StartSpan(ctx context.Context, name string, opts ...ISpanOptions) (context.Context, ISpan) {
	var kind SpanKind
	var kv []attribute.KeyValue
	for _, o := range opts {
		kind = cmp.Or(o.Kind, kind)
		kv = append(kv, attrs(o.Attributes)...)
	}
	// The SDK keeps the last value of a key, so a later option wins.
	ctx, sp := s.tracer.Start(ctx, name, trace.WithSpanKind(cmp.Or(otelKinds[kind], trace.SpanKindClient)), trace.WithAttributes(kv...))
	return ctx, span{sp}
}

// GetCurrentSpan implements ITracingService.
func (s *TracingService) GetCurrentSpan(ctx context.Context) ISpan {
	sp := trace.SpanFromContext(ctx)
	if !sp.SpanContext().IsValid() {
		return nil
	}
	return span{sp}
}

// SetAttribute implements ITracingService.
func (s *TracingService) SetAttribute(ctx context.Context, key string, value any) {
	trace.SpanFromContext(ctx).SetAttributes(attr(key, value))
}

// AddEvent implements ITracingService.
func (s *TracingService) AddEvent(ctx context.Context, name string, a map[string]any) {
	trace.SpanFromContext(ctx).AddEvent(name, trace.WithAttributes(attrs(a)...))
}

// RecordException implements ITracingService.
func (s *TracingService) RecordException(ctx context.Context, err error) {
	span{trace.SpanFromContext(ctx)}.RecordException(err)
}

// span adapts an OpenTelemetry span to ISpan.
type span struct{ s trace.Span }

// SetAttribute implements ISpan.
func (sp span) SetAttribute(key string, value any) { sp.s.SetAttributes(attr(key, value)) }

// SetAttributes implements ISpan.
func (sp span) SetAttributes(a map[string]any) { sp.s.SetAttributes(attrs(a)...) }

// AddEvent implements ISpan.
func (sp span) AddEvent(name string, a map[string]any) {
	sp.s.AddEvent(name, trace.WithAttributes(attrs(a)...))
}

// SetStatus implements ISpan.
func (sp span) SetStatus(st SpanStatus, msg string) {
	if st == StatusError {
		sp.s.SetStatus(codes.Error, msg)
		sp.s.SetAttributes(plugintrace.Error.Bool(true))
		return
	}
	sp.s.SetStatus(codes.Ok, "")
}

// RecordException implements ISpan.
func (sp span) RecordException(err error) {
	if err != nil {
		sp.s.RecordError(err, trace.WithStackTrace(true))
	}
}

// End implements ISpan.
func (sp span) End() { sp.s.End() }

// SpanContext implements ISpan.
func (sp span) SpanContext() trace.SpanContext { return sp.s.SpanContext() }

// otelKinds are the span kinds but CLIENT, the default.
var otelKinds = map[SpanKind]trace.SpanKind{KindInternal: trace.SpanKindInternal, KindServer: trace.SpanKindServer,
	KindProducer: trace.SpanKindProducer, KindConsumer: trace.SpanKindConsumer}

func attrs(m map[string]any) []attribute.KeyValue {
	kv := make([]attribute.KeyValue, 0, len(m))
	for k, v := range m {
		kv = append(kv, attr(k, v))
	}
	return kv
}

// attr converts a value keeping its type where OpenTelemetry has one; a
// value with a String method is written with it (time.Duration as "1.5s").
func attr(k string, v any) attribute.KeyValue {
	switch x := v.(type) {
	case []string:
		return attribute.StringSlice(k, x)
	case []int:
		return attribute.IntSlice(k, x)
	case []int64:
		return attribute.Int64Slice(k, x)
	case []byte:
		return attribute.ByteSlice(k, x)
	case []bool:
		return attribute.BoolSlice(k, x)
	case []float64:
		return attribute.Float64Slice(k, x)
	case fmt.Stringer:
		// fmt calls String with a recover: a nil pointer whose String has
		// a value receiver would panic here.
		return attribute.String(k, fmt.Sprint(x))
	}
	return byKind(k, v)
}

// byKind converts by reflect.Kind, so that named types (type Cents int64)
// keep their kind.
func byKind(k string, v any) attribute.KeyValue {
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.String:
		return attribute.String(k, rv.String())
	case reflect.Bool:
		return attribute.Bool(k, rv.Bool())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return attribute.Int64(k, rv.Int())
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		if rv.Uint() > math.MaxInt64 { // above the int64 range: its decimal string
			return attribute.String(k, strconv.FormatUint(rv.Uint(), 10))
		}
		return attribute.Int64(k, int64(rv.Uint()))
	case reflect.Float32, reflect.Float64:
		return attribute.Float64(k, rv.Float())
	}
	return attribute.String(k, fmt.Sprint(v))
}
