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
	for _, c := range []struct {
		cmd  redis.Cmder
		want bool
	}{
		{redis.NewStatusCmd(ctx, "HELLO", 3), true},
		{redis.NewStatusCmd(ctx, "auth", "pw"), true},
		{redis.NewStatusCmd(ctx, "CLIENT", "SETINFO", "LIB-NAME", "x"), true},
		{redis.NewStatusCmd(ctx, "get", "k"), false},
		{redis.NewStatusCmd(ctx, "ping"), false},
	} {
		if got := Command(c.cmd.Name()); got != c.want {
			t.Errorf("%v: %v, want %v", c.cmd.Args(), got, c.want)
		}
	}
	sel, get := redis.NewStatusCmd(ctx, "select", 1), redis.NewStringCmd(ctx, "get", "k")
	if !Pipeline([]redis.Cmder{sel, redis.NewStatusCmd(ctx, "client", "setname", "n")}) {
		t.Error("SELECT + CLIENT SETNAME is not a handshake pipeline")
	}
	if Pipeline([]redis.Cmder{sel, get}) || Pipeline(nil) {
		t.Error("a pipeline with GET, or an empty one, taken for a handshake")
	}
}
