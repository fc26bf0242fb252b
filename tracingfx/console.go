package tracingfx

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"math"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// ConsoleSpan is one line of the console exporter. timestamp (the start)
// and duration are in microseconds, as OpenTelemetry JS prints them. A
// float JSON cannot hold is written as "NaN", "+Inf" or "-Inf".
type ConsoleSpan struct {
	TraceID      string         `json:"traceId"`
	SpanID       string         `json:"spanId"`
	ParentSpanID string         `json:"parentSpanId,omitempty"`
	Name         string         `json:"name"`
	Kind         string         `json:"kind"`
	Timestamp    int64          `json:"timestamp"`
	Duration     int64          `json:"duration"`
	Attributes   map[string]any `json:"attributes"`
	Events       []ConsoleEvent `json:"events,omitempty"`
	Status       ConsoleStatus  `json:"status"`
}

// ConsoleEvent is a span event in the console format; its attributes are
// written as ConsoleSpan's are.
type ConsoleEvent struct {
	Name       string         `json:"name"`
	Timestamp  int64          `json:"timestamp"`
	Attributes map[string]any `json:"attributes,omitempty"`
}

// ConsoleStatus is the span status: code OK, ERROR or UNSET.
type ConsoleStatus struct {
	Code    string `json:"code"`
	Message string `json:"message,omitempty"`
}

// consoleExporter writes one JSON object per span per line. The SDK never
// calls ExportSpans concurrently.
type consoleExporter struct{ w io.Writer }

// NewConsoleExporter returns the console exporter writing to w.
func NewConsoleExporter(w io.Writer) sdktrace.SpanExporter { return &consoleExporter{w: w} }

// ExportSpans implements sdktrace.SpanExporter.
func (e *consoleExporter) ExportSpans(_ context.Context, spans []sdktrace.ReadOnlySpan) error {
	enc := json.NewEncoder(e.w)
	var err error
	for _, s := range spans {
		// One span's failure (a failed write) does not keep the others
		// from being written.
		err = errors.Join(err, enc.Encode(toConsole(s)))
	}
	return err
}

// Shutdown implements sdktrace.SpanExporter.
func (e *consoleExporter) Shutdown(context.Context) error { return nil }

func toConsole(s sdktrace.ReadOnlySpan) ConsoleSpan {
	c := ConsoleSpan{
		TraceID:    s.SpanContext().TraceID().String(),
		SpanID:     s.SpanContext().SpanID().String(),
		Name:       s.Name(),
		Kind:       strings.ToUpper(trace.ValidateSpanKind(s.SpanKind()).String()),
		Timestamp:  s.StartTime().UnixMicro(),
		Duration:   s.EndTime().Sub(s.StartTime()).Microseconds(),
		Attributes: attrMap(s.Attributes()),
		Status:     ConsoleStatus{Code: strings.ToUpper(s.Status().Code.String()), Message: s.Status().Description},
	}
	if p := s.Parent(); p.IsValid() {
		c.ParentSpanID = p.SpanID().String()
	}
	for _, ev := range s.Events() {
		c.Events = append(c.Events, ConsoleEvent{Name: ev.Name, Timestamp: ev.Time.UnixMicro(), Attributes: attrMap(ev.Attributes)})
	}
	return c
}

func attrMap(kvs []attribute.KeyValue) map[string]any {
	m := make(map[string]any, len(kvs))
	for _, kv := range kvs {
		m[string(kv.Key)] = consoleValue(kv.Value)
	}
	return m
}

// consoleValue is v as encoding/json can write it: a non-finite float,
// which it refuses (the whole span would be lost), becomes its name, and
// a float slice holding one becomes a slice of numbers and such names.
func consoleValue(v attribute.Value) any {
	switch v.Type() {
	case attribute.FLOAT64:
		if f := v.AsFloat64(); math.IsNaN(f) || math.IsInf(f, 0) {
			return strconv.FormatFloat(f, 'g', -1, 64) // NaN, +Inf, -Inf
		}
	case attribute.SLICE: // nested values: each written as a value of its own
		vs := v.AsSlice()
		out := make([]any, len(vs))
		for i, e := range vs {
			out[i] = consoleValue(e)
		}
		return out
	case attribute.MAP:
		return attrMap(v.AsMap())
	case attribute.EMPTY:
		return nil
	case attribute.FLOAT64SLICE:
		fs := v.AsFloat64Slice()
		out := make([]any, len(fs))
		for i, f := range fs {
			out[i] = consoleValue(attribute.Float64Value(f))
		}
		return out
	}
	return v.AsInterface()
}
