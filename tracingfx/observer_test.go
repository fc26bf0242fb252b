package tracingfx

import (
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

func observerCore() (zapcore.Core, *observer.ObservedLogs) { return observer.New(zap.DebugLevel) }
