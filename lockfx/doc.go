// Package lockfx is a distributed lock on Redis as an Fx module: acquire
// with a TTL and a retry policy, release and extend only by the owner,
// optional automatic renewal while held, a validity that ends (and tells
// the holder) before Redis can let anyone else take the lock, and a
// fencing token, increasing across Redis restarts, that the holder passes
// to downstream writes so that a stale holder's writes can be refused.
// Operations are traced (lock.acquire, lock.release) and measured.
//
// # Getting started
//
//	fx.New(
//		storefx.Module, tracingfx.Module, metricsfx.Module, // tracing and metrics optional
//		lockfx.Module,
//		fx.Supply(lockfx.Config{TTL: 10 * time.Second}), // or &lockfx.Config{…}; optional
//		fx.Invoke(func(l *lockfx.Locker) { … }),
//	)
//
// Without Fx, New(rdb, cfg, WithRegisterer(reg), WithTracerProvider(tp)).
// Zero Config fields take their defaults; an invalid one fails start-up
// with a redisfx.ConfigError naming it.
//
// # The Redis client
//
// The module needs a Redis client (storefx.Module); without one start-up
// fails saying so. New refuses a go-redis client built without
// ContextTimeoutEnabled: go-redis would ignore context deadlines, and
// WaitTimeout could not bound a Redis call. storefx's clients have it.
//
// # Traces and lock names
//
// Lock names are often business identifiers ("card:" and a card number).
// Spans and error messages carry them as Config.KeyAttribute says:
// redacted by default, or a keyed digest with plugintrace.HashKey.
package lockfx
