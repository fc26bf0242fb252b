package lockfx

import (
	"go.uber.org/fx"

	"github.com/redisfx/redisfx/internal/clientcheck"
	"github.com/redisfx/redisfx/internal/plugin"
)

// Module provides the *Locker. It needs a Redis client (storefx.Module); a
// Config or *Config, registerer and plugin tracer are used when present.
var Module = fx.Module("redisfx.locks", clientcheck.Required("lockfx.Module"),
	plugin.Provide("lockfx", New, func(l *Locker) fx.Hook { return fx.StartStopHook(l.Start, l.Stop) }))
