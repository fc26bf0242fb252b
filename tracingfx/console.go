package tracingfx

import (
	"context"
	"encoding/json"
	"io"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// ConsoleSpan is one line of the console exporter. timestamp is the start
// in microseconds since the Unix epoch and duration is in microseconds, as
// OpenTelemetry JS prints them.
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

// ConsoleEvent is a span event in the console format.
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

// consoleExporter writes one JSON object per span per line.
type consoleExporter struct {
	mu sync.Mutex
	w  io.Writer
}

// NewConsoleExporter returns the console exporter writing to w.
func NewConsoleExporter(w io.Writer) sdktrace.SpanExporter { return &consoleExporter{w: w} }

// ExportSpans implements sdktrace.SpanExporter.
func (e *consoleExporter) ExportSpans(_ context.Context, spans []sdktrace.ReadOnlySpan) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	enc := json.NewEncoder(e.w)
	for _, s := range spans {
		if err := enc.Encode(toConsole(s)); err != nil {
			return err
		}
	}
	return nil
}

// Shutdown implements sdktrace.SpanExporter.
func (e *consoleExporter) Shutdown(context.Context) error { return nil }

func toConsole(s sdktrace.ReadOnlySpan) ConsoleSpan {
	c := ConsoleSpan{
		TraceID:    s.SpanContext().TraceID().String(),
		SpanID:     s.SpanContext().SpanID().String(),
		Name:       s.Name(),
		Kind:       kindName(s.SpanKind()),
		Timestamp:  s.StartTime().UnixMicro(),
		Duration:   s.EndTime().Sub(s.StartTime()).Microseconds(),
		Attributes: attrMap(s.Attributes()),
		Status:     ConsoleStatus{Code: statusName(s.Status().Code), Message: s.Status().Description},
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
		m[string(kv.Key)] = kv.Value.AsInterface()
	}
	return m
}

// kindName is the upper-case name of a span kind, as the console prints it.
func kindName(k trace.SpanKind) string {
	switch k {
	case trace.SpanKindClient:
		return "CLIENT"
	case trace.SpanKindServer:
		return "SERVER"
	case trace.SpanKindProducer:
		return "PRODUCER"
	case trace.SpanKindConsumer:
		return "CONSUMER"
	}
	return "INTERNAL"
}

func statusName(c codes.Code) string {
	switch c {
	case codes.Ok:
		return "OK"
	case codes.Error:
		return "ERROR"
	}
	return "UNSET"
}
