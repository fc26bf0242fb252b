package tracingfx

import (
	"context"
	"errors"

	sdklog "go.opentelemetry.io/otel/sdk/log"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// errShuttingDown ends an export still running when Provider.Shutdown's
// deadline passed.
var errShuttingDown = errors.New("tracingfx: export abandoned: the provider's shutdown deadline passed")

// exportAbort ends the exports in flight. The SDK's batch processors give
// up waiting at Shutdown's deadline but leave their export running until
// the export's own timeout (30 s by default, with retries against a backend
// that accepts and never answers): after the application stopped, a
// goroutine would still hold a connection to the backend. Each export runs
// under the abort's context too, and Provider.Shutdown cancels it when it
// returns.
type exportAbort struct {
	ctx    context.Context
	cancel context.CancelFunc
}

func newExportAbort() exportAbort {
	ctx, cancel := context.WithCancelCause(context.Background())
	return exportAbort{ctx: ctx, cancel: func() { cancel(errShuttingDown) }}
}

// end cancels the exports in flight and every later one (a zero
// exportAbort has none).
func (a exportAbort) end() {
	if a.cancel != nil {
		a.cancel()
	}
}

// bound is ctx, also cancelled by the abort; call release when done.
func (a exportAbort) bound(ctx context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(a.ctx, func() { cancel(context.Cause(a.ctx)) })
	return ctx, func() { stop(); cancel(nil) }
}

// spanExporter is the OTLP span exporter with the export guards: valid
// UTF-8 (validutf8.go) and the abort at shutdown. It tells gate (the
// dropGate in front of its batch processor) how many spans it received.
type spanExporter struct {
	sdktrace.SpanExporter
	abort exportAbort
	gate  *dropGate
}

// ExportSpans implements sdktrace.SpanExporter.
func (e *spanExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	if e.gate != nil {
		e.gate.exported(len(spans))
	}
	ctx, release := e.abort.bound(ctx)
	defer release()
	return e.SpanExporter.ExportSpans(ctx, validSpans(spans))
}

// logExporter is the OTLP log exporter with the same guards.
type logExporter struct {
	sdklog.Exporter
	abort exportAbort
}

// Export implements sdklog.Exporter.
func (e *logExporter) Export(ctx context.Context, records []sdklog.Record) error {
	ctx, release := e.abort.bound(ctx)
	defer release()
	return e.Exporter.Export(ctx, validRecords(records))
}
