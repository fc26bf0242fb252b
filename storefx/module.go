package storefx

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/redis/go-redis/v9"
	"go.uber.org/fx"
)

// InstrumentationGroup is the value group of Instrumentation values.
const InstrumentationGroup = "redisfx.store.instrumentation"

func fxAnnotateInstrumentation(constructor any) any {
	return fx.Annotate(constructor, fx.ResultTags(`group:"`+InstrumentationGroup+`"`))
}

// Module provides the application's default Redis client as a
// redis.UniversalClient (and as *Client), and the *Registry of all clients.
// With a prometheus.Registerer in the graph (metricsfx) it registers the
// store availability gauge store_up{client}.
//
// The configuration is an optional Config in the graph; without one the
// client connects to localhost:6379 (DefaultConfig). Use FromEnv to read
// REDIS_URL. On start the client is pinged, with retries, for at most
// Config.ConnectTimeout; start-up fails with an error naming the address if
// Redis does not answer. On stop the client is closed.
var Module = fx.Module("redisfx.store",
	fx.Provide(
		fx.Annotate(newRegistry, fx.ParamTags(`optional:"true"`)),
		fx.Annotate(newDefaultClient, fx.ParamTags(`optional:"true"`, "", "", `group:"`+InstrumentationGroup+`"`)),
		func(c *Client) redis.UniversalClient { return c.UniversalClient },
	),
)

// newRegistry builds the registry and, when the app has a metrics
// registerer, the store_up{client} availability gauge.
func newRegistry(metrics prometheus.Registerer) (*Registry, error) {
	r := NewRegistry()
	if metrics != nil {
		if err := metrics.Register(NewAvailabilityCollector(r, time.Second)); err != nil {
			return nil, err
		}
	}
	return r, nil
}

func newDefaultClient(cfg *Config, lc fx.Lifecycle, reg *Registry, inst []Instrumentation) (*Client, error) {
	c := DefaultConfig()
	if cfg != nil {
		c = *cfg
	}
	return newManagedClient(DefaultClientName, c, lc, reg, inst)
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
	return fx.Provide(
		fx.Annotate(func(lc fx.Lifecycle, reg *Registry, inst []Instrumentation) (*Client, error) {
			return newManagedClient(name, cfg, lc, reg, inst)
		}, fx.ParamTags("", "", `group:"`+InstrumentationGroup+`"`), fx.ResultTags(tag)),
		fx.Annotate(func(c *Client) redis.UniversalClient { return c.UniversalClient },
			fx.ParamTags(tag), fx.ResultTags(tag)),
	)
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
	lc.Append(fx.Hook{
		OnStart: func(ctx context.Context) error { return connect(ctx, c, cfg.connectTimeout()) },
		OnStop:  func(context.Context) error { return c.Close() },
	})
	return c, nil
}
