package storefx_test

import (
	"github.com/redis/go-redis/v9"
	"go.uber.org/fx"

	"github.com/redisfx/redisfx/storefx"
)

// A second client, consumed by name; both are checked at start and closed at stop.
func ExampleNamedClient() {
	type deps struct {
		fx.In
		Main  redis.UniversalClient
		Cache redis.UniversalClient `name:"cache"`
	}
	_ = fx.New(
		storefx.Module,
		fx.Provide(storefx.FromEnvConfig), // REDIS_URL, else localhost:6379
		storefx.NamedClient("cache", storefx.Config{URL: "redis://cache.internal:6379/0"}),
		fx.Invoke(func(d deps) {}),
	)
}
