package tracingfx

import (
	"context"
	"sync"

	sdklog "go.opentelemetry.io/otel/sdk/log"
	"go.opentelemetry.io/otel/sdk/resource"
)

// logPipeline is the log pipeline behind the log bridge. Its exporter is
// built with the Provider; the LoggerProvider (a 1.6 MB queue and a
// goroutine) only on first use, by WithLogBridge.
type logPipeline struct {
	res *resource.Resource
	exp sdklog.Exporter

	mu       sync.Mutex
	provider *sdklog.LoggerProvider
	shut     bool
}

// get returns the LoggerProvider, building it on the first call; nil after
// shutdown, so that nothing is built that would never be flushed.
func (l *logPipeline) get() *sdklog.LoggerProvider {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.provider == nil && !l.shut {
		l.provider = sdklog.NewLoggerProvider(sdklog.WithResource(l.res), sdklog.WithProcessor(sdklog.NewBatchProcessor(l.exp)))
	}
	return l.provider
}

// shutdown flushes the provider if it was built, else closes the exporter;
// nil without a log pipeline.
func (l *logPipeline) shutdown(ctx context.Context) error {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	l.shut = true
	p := l.provider
	l.mu.Unlock()
	if p != nil {
		return p.Shutdown(ctx)
	}
	return l.exp.Shutdown(ctx)
}
