// Package cachefx is a Redis cache as an Fx module: byte values with a TTL,
// namespaces, tags with invalidate-by-tags, a GetOrLoad whose loader runs
// once per key across processes and never overwrites a newer write, JSON
// helpers, and an optional in-process first layer kept coherent across
// processes. docs/cache.md states its guarantees.
//
//	fx.New(
//		storefx.Module, tracingfx.Module, metricsfx.Module, // tracing and metrics optional
//		cachefx.Module,
//		fx.Supply(cachefx.Config{Local: cachefx.LocalConfig{MaxEntries: 10000}}), // optional
//		fx.Invoke(func(c *cachefx.Cache) { … }),
//	)
//
// Without Fx, New(rdb, cfg, opts...), then Start and Close.
package cachefx
