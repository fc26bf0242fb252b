package clientcheck_test

import (
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"go.uber.org/fx"
	"go.uber.org/goleak"

	"github.com/redisfx/redisfx/internal/clientcheck"
	"github.com/redisfx/redisfx/storefx"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestHonoursDeadlines(t *testing.T) {
	plain := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	timed := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _, _, _, _ = plain.Close(), timed.Close(), cluster.Close(), ring.Close() })

	err := clientcheck.HonoursDeadlines("lockfx", "Config.WaitTimeout", plain)
	if err == nil || !strings.HasPrefix(err.Error(), "lockfx: the *redis.Client ignores context deadlines, so Config.WaitTimeout") ||
		!strings.Contains(err.Error(), "ContextTimeoutEnabled: true") {
		t.Errorf("plain client: %v", err)
	}
	if err := clientcheck.HonoursDeadlines("cachefx", "Config.StoreTimeout", cluster); err == nil || !strings.Contains(err.Error(), "*redis.ClusterClient") {
		t.Errorf("cluster client: %v", err)
	}
	if err := clientcheck.HonoursDeadlines("cachefx", "Config.StoreTimeout", nil); err == nil || err.Error() != "cachefx: New needs a Redis client" {
		t.Errorf("nil client: %v", err)
	}
	for _, ok := range []redis.UniversalClient{timed, ring, &storefx.Client{UniversalClient: timed}} {
		if err := clientcheck.HonoursDeadlines("x", "Config.StoreTimeout", ok); err != nil {
			t.Errorf("%T: %v", ok, err)
		}
	}
	if err := clientcheck.HonoursDeadlines("x", "Config.StoreTimeout", &storefx.Client{UniversalClient: plain}); err == nil {
		t.Error("a storefx.Client around a plain client passed")
	}
}

func TestRequired_NamesWhatToAdd(t *testing.T) {
	app := fx.New(fx.NopLogger, clientcheck.Required("lockfx.Module"))
	err := app.Err()
	if err == nil || !strings.Contains(err.Error(), "lockfx.Module needs a Redis client: add storefx.Module to the app") {
		t.Fatalf("fx.New without a client: %v", err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	defer rdb.Close()
	app = fx.New(fx.NopLogger, clientcheck.Required("lockfx.Module"),
		fx.Provide(func() redis.UniversalClient { return rdb }))
	if err := app.Err(); err != nil {
		t.Fatalf("fx.New with a client: %v", err)
	}
}
