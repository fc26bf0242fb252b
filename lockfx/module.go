package lockfx

import (
	"go.uber.org/fx"

	"github.com/redisfx/redisfx/internal/clientcheck"
	"github.com/redisfx/redisfx/internal/plugin"
)

// Module provides the *Locker. It needs a Redis client (storefx.Module); a
// Config or *Config, registerer and plugin tracer are used when present.
var Module = fx.Module("redisfx.locks", clientcheck.Required("lockfx.Module"), fx.Provide(newFromGraph))

func newFromGraph(in plugin.In[Config]) (*Locker, error) {
	cfg, opts, err := in.Pick("lockfx")
	if err != nil {
		return nil, err
	}
	l, err := New(in.Redis, cfg, opts...)
	if err != nil {
		return nil, err
	}
	in.Lifecycle.Append(fx.StartStopHook(l.Start, l.Stop))
	return l, nil
}
