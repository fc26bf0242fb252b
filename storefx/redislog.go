package storefx

import (
	"context"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
	"go.uber.org/fx"
	"go.uber.org/zap"
)

// RouteRedisLogs sends go-redis's own log lines (a failed dial, a pool
// problem) to the app's *zap.Logger, named "go-redis", at warn level. It is
// not part of Module: go-redis's logger is process-wide, and it is not
// undone at stop.
//
//	fx.New(storefx.Module, storefx.RouteRedisLogs, …)
var RouteRedisLogs = fx.Invoke(func(log *zap.Logger) { redis.SetLogger(RedisLogger{Log: log.Named("go-redis")}) })

// RedisLogger adapts a *zap.Logger to go-redis's logger interface; pass it
// to redis.SetLogger to route go-redis's log lines without Fx.
type RedisLogger struct {
	Log *zap.Logger
}

// Printf logs one go-redis line at warn level: go-redis logs only failures.
func (l RedisLogger) Printf(_ context.Context, format string, v ...any) {
	l.Log.Warn(strings.TrimSpace(fmt.Sprintf(format, v...)))
}
