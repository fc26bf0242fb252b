package cachefx

import (
	"go.uber.org/fx"

	"github.com/redisfx/redisfx/internal/clientcheck"
	"github.com/redisfx/redisfx/internal/plugin"
)

// Module provides the *Cache. It needs a Redis client (storefx.Module); a
// Config or *Config, registerer and plugin tracer are used when present.
var Module = fx.Module("redisfx.cache", clientcheck.Required("cachefx.Module"), fx.Provide(newFromGraph))

func newFromGraph(in plugin.In[Config]) (*Cache, error) {
	cfg, opts, err := in.Pick("cachefx")
	if err != nil {
		return nil, err
	}
	c, err := New(in.Redis, cfg, opts...)
	if err != nil {
		return nil, err
	}
	in.Lifecycle.Append(fx.StartStopHook(c.Start, c.Close))
	return c, nil
}
