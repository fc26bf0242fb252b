package tracingfx

import (
	"context"
	"testing"

	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
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

// With a traces endpoint of its own path, the logs endpoint cannot be
// derived: the bridge says so instead of posting logs to the traces URL.
func TestLogBridge_UnknownLogsEndpointWarns(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zap.InfoLevel)
	app := fxtest.New(t, fx.NopLogger, fx.Supply(zap.New(core)),
		fx.Supply(Config{Exporter: ExporterConfig{Endpoint: "http://127.0.0.1:1/custom/traces"}}),
		Module, WithLogBridge, fx.Invoke(func(*zap.Logger) {}))
	app.RequireStart()
	app.RequireStop()
	const want = "tracing: the log bridge exports nothing: the traces endpoint http://127.0.0.1:1/custom/traces does not end in /v1/traces, so the logs endpoint is unknown; set OTEL_EXPORTER_OTLP_LOGS_ENDPOINT"
	if logs.FilterMessage(want).Len() != 1 {
		t.Fatalf("no warning %q in %v", want, logs.All())
	}
}
