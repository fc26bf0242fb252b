package storefx_test

import (
	"context"
	"log"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/redisfx/redisfx/internal/redistest"
	"github.com/redisfx/redisfx/storefx"
)

// Not parallel: go-redis's logger is process-wide.
func TestRouteRedisLogs(t *testing.T) {
	core, logs := observer.New(zap.WarnLevel)
	app := fxtest.New(t, storefx.RouteRedisLogs, fx.Supply(zap.New(core)))
	app.RequireStart()
	defer app.RequireStop()
	defer redis.SetLogger(stderrLogger{log.New(os.Stderr, "redis: ", log.LstdFlags)})

	srv := redistest.StartPrivate(t)
	addr := srv.Addr()
	srv.Kill()
	c := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true, DialerRetries: 1, MaxRetries: -1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("ping of a dead server succeeded")
	}
	for _, e := range logs.All() {
		if e.LoggerName == "go-redis" && strings.Contains(e.Message, "connection refused") {
			return
		}
	}
	t.Fatalf("no go-redis line in the app's log: %v", logs.All())
}

// stderrLogger is a logger like go-redis's default, to restore after the test.
type stderrLogger struct{ l *log.Logger }

func (s stderrLogger) Printf(_ context.Context, format string, v ...any) { s.l.Printf(format, v...) }
