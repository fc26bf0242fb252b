package cachefx

import (
	"go.uber.org/fx"

	"github.com/redisfx/redisfx/internal/clientcheck"
	"github.com/redisfx/redisfx/internal/plugin"
)

// Module provides the *Cache. It needs a Redis client (storefx.Module); a
// Config or *Config, registerer and plugin tracer are used when present.
var Module = fx.Module("redisfx.cache", clientcheck.Required("cachefx.Module"),
	plugin.Provide("cachefx", New, func(c *Cache) fx.Hook { return fx.StartStopHook(c.Start, c.Close) }))
