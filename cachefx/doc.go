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
// Without Fx, New(rdb, cfg, opts...), then Start and Close. The client
// must have ContextTimeoutEnabled (storefx's have). Zero Config fields take
// their defaults; an invalid one fails start-up with a redisfx.ConfigError
// naming it.
//
// # Traces and keys
//
// Cache keys and tags are often business identifiers (a user id, an e-mail
// address). Spans and error messages carry them as Config.KeyAttribute
// says: redacted by default, or a keyed digest with plugintrace.HashKey.
package cachefx
