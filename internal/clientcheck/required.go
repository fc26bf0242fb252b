package clientcheck

import (
	"fmt"

	"github.com/redis/go-redis/v9"
	"go.uber.org/fx"
)

// redisInGraph is the Redis client as seen by Required: optional here only,
// so that its absence gets a message naming what to add (Fx's own error
// names only the type).
type redisInGraph struct {
	fx.In
	Redis redis.UniversalClient `optional:"true"`
}

// Required is an fx.Invoke, for a module's fx.Module, that fails fx.New
// when the app has no Redis client, saying to add storefx.Module. Module
// invokes run before the app's own, so this message comes first.
func Required(module string) fx.Option {
	return fx.Invoke(func(in redisInGraph) error {
		if in.Redis == nil {
			return fmt.Errorf("%s needs a Redis client: add storefx.Module to the app", module)
		}
		return nil
	})
}
