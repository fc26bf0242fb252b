// Package cachefx is a Redis cache as an Fx module: byte values with a TTL,
// namespaces, tags with invalidate-by-tags, GetOrLoad whose loader runs once
// per key even under a stampede across processes and whose result never
// overwrites a newer write, JSON helpers, and an optional size- and
// age-bounded in-process first layer kept coherent across processes by
// invalidation messages. Operations are traced (cache.get, cache.set,
// cache.delete, cache.invalidate_by_tags, cache.load) and measured
// (cache_hits_total{layer}, cache_misses_total,
// cache_stampede_prevented_total, cache_size{layer}).
//
// # Getting started
//
//	fx.New(
//		storefx.Module, tracingfx.Module, metricsfx.Module, // tracing and metrics optional
//		cachefx.Module,
//		fx.Supply(cachefx.Config{Local: cachefx.LocalConfig{MaxEntries: 10000}}), // optional
//		fx.Invoke(func(c *cachefx.Cache) { … }),
//	)
//
// Without Fx, New(rdb, cfg, opts...), then Start and Close. Zero Config
// fields take their defaults; an invalid one fails start-up with a
// redisfx.ConfigError naming it.
//
// # The Redis client
//
// The module needs a Redis client (storefx.Module); without one start-up
// fails saying so. New refuses a go-redis client built without
// ContextTimeoutEnabled: go-redis would ignore context deadlines, and
// StoreTimeout could not bound a Redis call. storefx's clients have it.
//
// # Traces and keys
//
// Cache keys and tags are often business identifiers (a user id, an e-mail
// address). Spans and error messages carry them as Config.KeyAttribute
// says: redacted by default, or a keyed digest with plugintrace.HashKey.
package cachefx
