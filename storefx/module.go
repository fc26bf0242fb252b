package storefx

import (
	"context"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/redisfx/redisfx/internal/fxconfig"

	"github.com/redis/go-redis/v9"
	"go.uber.org/fx"
)

// InstrumentationGroup is the value group of Instrumentation values.
const InstrumentationGroup = "redisfx.store.instrumentation"

// Module provides the application's default Redis client as a
// redis.UniversalClient (and as *Client), and the *Registry of all clients;
// with a prometheus.Registerer in the graph it registers store_up{client}.
//
// The configuration is a Config or *Config in the graph (fx.Supply either),
// else DefaultConfig; FromEnvConfig reads REDIS_URL. On start the client is
// pinged for at most Config.ConnectTimeout (see the package documentation
// for the errors), then health-checked in the background; on stop it is
// closed. The client is built even when nothing asks for it, so that Redis
// is checked at start and /readyz reports it.
var Module = fx.Module("redisfx.store",
	fx.Provide(
		newRegistry,
		newDefaultClient,
		func(c *Client) redis.UniversalClient { return c.UniversalClient },
	),
	fx.Invoke(func(*Client) {}), // built with the app: see above
)

type registryParams struct {
	fx.In
	// Registerer receives store_up{client} (from metricsfx).
	Registerer prometheus.Registerer `optional:"true"`
}

// newRegistry builds the registry and, when the app has a metrics
// registerer, the store_up{client} availability gauge.
func newRegistry(p registryParams) (*Registry, error) {
	r := NewRegistry()
	if p.Registerer != nil {
		if err := p.Registerer.Register(NewAvailabilityCollector(r)); err != nil {
			return nil, err
		}
	}
	return r, nil
}

type clientParams struct {
	fx.In
	Lifecycle       fx.Lifecycle
	Registry        *Registry
	Instrumentation []Instrumentation `group:"redisfx.store.instrumentation"`
	// The app's configuration, in either form (at most one of them).
	Config      *Config `optional:"true"`
	ConfigValue Config  `optional:"true"`
}

func newDefaultClient(p clientParams) (*Client, error) {
	cfg, err := fxconfig.Pick(p.Config, p.ConfigValue)
	if err != nil {
		return nil, fmt.Errorf("storefx: %w", err)
	}
	return newManagedClient(DefaultClientName, cfg, p.Lifecycle, p.Registry, p.Instrumentation)
}

// NamedClient adds another client to the application, provided as a
// redis.UniversalClient (and *Client) tagged name:"<name>", for example
//
//	storefx.NamedClient("cache", storefx.Config{URL: "redis://cache:6379"})
//
// consumed with `name:"cache"`. It is instrumented, started, checked and
// closed like the default client, and its spans carry redisfx.client=<name>.
func NamedClient(name string, cfg Config) fx.Option {
	tag := `name:"` + name + `"`
	return fx.Options(
		fx.Provide(
			fx.Annotate(func(p namedClientParams) (*Client, error) {
				return newManagedClient(name, cfg, p.Lifecycle, p.Registry, p.Instrumentation)
			}, fx.ResultTags(tag)),
			fx.Annotate(func(c *Client) redis.UniversalClient { return c.UniversalClient },
				fx.ParamTags(tag), fx.ResultTags(tag)),
		),
		fx.Invoke(fx.Annotate(func(*Client) {}, fx.ParamTags(tag))), // built with the app, as Module's
	)
}

type namedClientParams struct {
	fx.In
	Lifecycle fx.Lifecycle
	Registry  *Registry
	// Instrumentation adds hooks to every client (tracingfx's command spans).
	Instrumentation []Instrumentation `group:"redisfx.store.instrumentation"`
}

func newManagedClient(name string, cfg Config, lc fx.Lifecycle, reg *Registry, inst []Instrumentation) (*Client, error) {
	c, err := New(name, cfg, inst...)
	if err != nil {
		return nil, err
	}
	if err := reg.Add(c); err != nil {
		_ = c.Close()
		return nil, err
	}
	var unwatch func()
	lc.Append(fx.Hook{
		OnStart: func(ctx context.Context) error {
			// Fx runs no OnStop after a failed OnStart: close the client here.
			if err := connect(ctx, c, cfg.connectTimeout()); err != nil {
				_ = c.Close()
				return err
			}
			interval, timeout := cfg.healthCheck()
			var err error
			if unwatch, err = reg.Watch(name, interval, timeout); err != nil {
				_ = c.Close()
			}
			return err
		},
		OnStop: func(context.Context) error {
			// Closing first ends a health check waiting for an answer (its
			// context does not); unwatch then ends one dialling.
			err := c.Close()
			unwatch()
			return err
		},
	})
	return c, nil
}
