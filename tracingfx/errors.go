package tracingfx

import (
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.uber.org/zap"

	"github.com/redisfx/redisfx/internal/throttle"
)

// errorLog is OpenTelemetry's process-wide error handler (a failed export,
// rejected credentials): it logs to the running app's logger, at most once
// per interval with a count of the suppressed ones.
type errorLog struct {
	log        atomic.Pointer[zap.Logger]
	every      throttle.Every
	suppressed atomic.Int64
	onError    atomic.Pointer[func()]
}

var (
	otelErrors     = &errorLog{every: throttle.Every{Interval: 10 * time.Second}}
	installHandler sync.Once
)

// Handle implements otel.ErrorHandler.
func (e *errorLog) Handle(err error) {
	if f := e.onError.Load(); f != nil && *f != nil {
		(*f)()
	}
	log := e.log.Load()
	if log == nil {
		return
	}
	if !e.every.Allow() {
		e.suppressed.Add(1)
		return
	}
	log.Warn("opentelemetry: export or SDK error (spans or logs may be lost)",
		zap.Error(err), zap.Int64("suppressed_since_last", e.suppressed.Swap(0)))
}

// useErrorLogger routes OpenTelemetry errors to log; onError (may be nil)
// is called for each, to count them.
func useErrorLogger(log *zap.Logger, onError func()) {
	installHandler.Do(func() { otel.SetErrorHandler(otelErrors) })
	otelErrors.log.Store(log)
	otelErrors.onError.Store(&onError)
}
