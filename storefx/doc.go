// Package storefx connects an Fx application to Redis: it provides the
// redis.UniversalClient every other redisfx module uses, checks it at start,
// and closes it at stop.
//
//	fx.New(
//		storefx.Module,
//		fx.Provide(storefx.FromEnvConfig), // REDIS_URL, else localhost:6379
//		fx.Invoke(func(rdb redis.UniversalClient) { … }),
//	)
//
// One Config describes a standalone, Sentinel or Cluster client (see
// Config). Every client is health-checked in the background (Registry,
// store_up, /readyz) and has a circuit breaker (BreakerConfig). Start-up
// errors name the field to fix; docs/configuration.md lists them, and
// docs/reliability.md describes the breaker.
package storefx
