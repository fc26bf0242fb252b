package tracingfx

import (
	"context"
	"testing"

	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	"go.uber.org/zap"
)

// With WithLogBridge and an OTLP exporter, log records are exported over
// OTLP with the trace and span ids of the context passed as a field.
func TestLogBridge_ExportsLogsWithTraceIDs(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t)
	var log *zap.Logger
	var svc ITracingService
	app := fxtest.New(t, fx.NopLogger,
		fx.Provide(zap.NewNop),
		fx.Supply(&Config{Exporter: ExporterConfig{Type: ExporterOTLP, Endpoint: rc.URL}}),
		Module, WithLogBridge,
		fx.Populate(&log, fx.Annotate(&svc, fx.ParamTags(`name:"TRACING_SERVICE"`))),
	)
	app.RequireStart()
	var traceID string
	_ = svc.WithSpan(context.Background(), "op", func(ctx context.Context) error {
		traceID = svc.GetCurrentSpan(ctx).SpanContext().TraceID().String()
		log.Info("charged the card", zap.Any("ctx", ctx), zap.String("payment", "pay_1"))
		return nil
	})
	app.RequireStop()
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for _, l := range rc.logs {
		if l.Body.GetStringValue() == "charged the card" {
			if hexID(l.TraceId) != traceID {
				t.Fatalf("log trace id %x, want %s", l.TraceId, traceID)
			}
			return
		}
	}
	t.Fatalf("log record not exported; got %d records", len(rc.logs))
}
