package handshake

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestCommandAndPipeline(t *testing.T) {
	ctx := context.Background()
	cmd := func(args ...any) redis.Cmder { return redis.NewStatusCmd(ctx, args...) }
	for _, c := range []struct {
		cmd  redis.Cmder
		want bool
	}{
		{cmd("HELLO", 3), true},
		{cmd("auth", "pw"), true},
		{cmd("CLIENT", "SETINFO", "LIB-NAME", "x"), true},
		{cmd("client", "setname", "n"), true},
		{cmd("client", "MAINT_NOTIFICATIONS", "on"), true},
		// The application's own: helper-74 had CLIENT ID pass an open
		// breaker when every CLIENT command was taken for a handshake.
		{cmd("client", "id"), false},
		{cmd("CLIENT", "LIST"), false},
		{cmd("client"), false},
		{cmd("select", 0), false},
		{cmd("get", "k"), false},
		{cmd("ping"), false},
	} {
		if got := Command(c.cmd.Name(), c.cmd.Args()); got != c.want {
			t.Errorf("%v: %v, want %v", c.cmd.Args(), got, c.want)
		}
	}
	if !Pipeline([]redis.Cmder{cmd("select", 1), cmd("readonly"), cmd("client", "setname", "n"), cmd("client", "tracking", "on")}) ||
		!Pipeline([]redis.Cmder{cmd("client", "setinfo", "LIB-NAME", "go-redis"), cmd("client", "setinfo", "LIB-VER", "9")}) {
		t.Error("go-redis's init pipelines are not handshakes")
	}
	if Pipeline([]redis.Cmder{cmd("select", 1), cmd("get", "k")}) || Pipeline([]redis.Cmder{cmd("client", "getname")}) || Pipeline(nil) {
		t.Error("a pipeline with GET or CLIENT GETNAME, or an empty one, taken for a handshake")
	}
}
