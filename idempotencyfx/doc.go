// Package idempotencyfx makes an HTTP route run its handler once per
// idempotency key: a client that retries a POST gets the recorded response
// of the first attempt instead of a second charge.
//
//	fx.New(
//		idempotencyfx.Module, storefx.Module, httpfx.Module,
//		fx.Provide(zap.NewProduction),
//		fx.Provide(httpfx.AsRoutes(func() httpfx.Routes {
//			return func(r chi.Router) {
//				r.With(idempotencyfx.Idempotent()).Post("/payments", createPayment)
//			}
//		})),
//	)
//
// Without Fx, New builds a Service on a go-redis client and Service.Install
// puts it on a router; Service.Do serves work that is not HTTP.
// docs/idempotency.md states every rule and the record layout in Redis.
package idempotencyfx
