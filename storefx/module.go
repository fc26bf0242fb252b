package storefx

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/fx"

	"github.com/redisfx/redisfx/internal/fxconfig"
)

// InstrumentationGroup is the value group of Instrumentation values.
const InstrumentationGroup = "redisfx.store.instrumentation"

// Module provides the application's default Redis client as a
// redis.UniversalClient (and as *Client), and the *Registry of all clients;
// with a prometheus.Registerer in the graph it registers store_up{client}.
//
// The configuration is a Config or *Config in the graph (fx.Supply either),
// else DefaultConfig; FromEnvConfig reads REDIS_URL. The client is built
// even when nothing asks for it, pinged at start for at most
// Config.ConnectTimeout, then health-checked in the background, and closed
// at stop.
var Module = fx.Module("redisfx.store",
	fx.Provide(
		newRegistry,
		newDefaultClient,
		func(c *Client) redis.UniversalClient { return c.UniversalClient },
	),
	fx.Invoke(func(*Client) {}),
)

func newRegistry(p struct {
	fx.In
	Registerer prometheus.Registerer `optional:"true"`
}) (*Registry, error) {
	r := NewRegistry()
	if p.Registerer != nil {
		if err := p.Registerer.Register(NewAvailabilityCollector(r)); err != nil {
			return nil, err
		}
	}
	return r, nil
}

type clientDeps struct {
	fx.In
	Lifecycle       fx.Lifecycle
	Registry        *Registry
	Instrumentation []Instrumentation `group:"redisfx.store.instrumentation"`
}

func newDefaultClient(p struct {
	fx.In
	Deps        clientDeps
	Config      *Config `optional:"true"`
	ConfigValue Config  `optional:"true"`
}) (*Client, error) {
	cfg, err := fxconfig.Pick(p.Config, p.ConfigValue)
	if err != nil {
		return nil, fmt.Errorf("storefx: %w", err)
	}
	return newManagedClient(DefaultClientName, cfg, p.Deps)
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
			fx.Annotate(func(p clientDeps) (*Client, error) { return newManagedClient(name, cfg, p) }, fx.ResultTags(tag)),
			fx.Annotate(func(c *Client) redis.UniversalClient { return c.UniversalClient },
				fx.ParamTags(tag), fx.ResultTags(tag)),
		),
		fx.Invoke(fx.Annotate(func(*Client) {}, fx.ParamTags(tag))),
	)
}

func newManagedClient(name string, cfg Config, p clientDeps) (*Client, error) {
	c, err := New(name, cfg, p.Instrumentation...)
	if err != nil {
		return nil, err
	}
	if err := p.Registry.Add(c); err != nil {
		_ = c.Close()
		return nil, err
	}
	var unwatch func()
	p.Lifecycle.Append(fx.Hook{
		OnStart: func(ctx context.Context) (err error) {
			// Fx runs no OnStop after a failed OnStart: close the client here.
			defer func() {
				if err != nil {
					_ = c.Close()
				}
			}()
			if err := connect(ctx, c, cmp.Or(cfg.ConnectTimeout, 5*time.Second)); err != nil {
				return err
			}
			unwatch, err = p.Registry.Watch(name, cmp.Or(cfg.HealthCheckInterval, DefaultHealthCheckInterval),
				cmp.Or(cfg.HealthCheckTimeout, DefaultHealthCheckTimeout))
			return err
		},
		OnStop: func(context.Context) error {
			// Closing first ends a health check waiting for an answer; unwatch
			// then ends one dialling.
			err := c.Close()
			unwatch()
			return err
		},
	})
	return c, nil
}
