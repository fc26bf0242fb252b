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
// A request without the Idempotency-Key header passes through (unless the
// route uses IdempotentRequired). The first request with a key runs the
// handler, and its response is recorded before it is sent; a repeat with
// the same fingerprint gets it again with Idempotent-Replayed: true, one
// with another fingerprint gets 422, one while the first still runs waits
// up to WaitTimeout, then gets its result or 409. A 5xx, an error or a
// panic records a failure: repeats get 409 until LockTimeout has passed.
// When Redis cannot be reached, ErrorPolicy decides (fail-closed: 500).
//
// Without Fx, New builds a Service on a go-redis client and Service.Install
// puts it on a router of your own; Service.Do gives work that is not HTTP
// the same guarantee. docs/idempotency.md states every rule and the record
// layout in Redis.
package idempotencyfx
