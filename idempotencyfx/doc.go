// Package idempotencyfx makes an HTTP route run its handler once per
// idempotency key: a client that retries a POST (a network timeout, a
// double click) gets the recorded response of the first attempt instead of
// a second charge.
//
// # Getting started
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
// The configuration is a Config or *Config in the graph; its zero value is
// the defaults (24 h records, 30 s lease, 10 s wait, fail-closed). Without
// Fx, New builds a Service on any storefx or go-redis client whose context
// deadlines are enforced, and Service.Install puts it on a router of your own.
//
// # The rules
//
//   - A request without the Idempotency-Key header passes through (unless the
//     route uses IdempotentRequired, or Config.RequireKey).
//   - The first request with a key runs the handler; its response (status,
//     headers, body) is recorded when the handler returns, before it is sent.
//   - A repeat with the same fingerprint (method, path, query and
//     canonical JSON body, or Config.FingerprintGenerator) gets that response
//     again, byte for byte, with Idempotent-Replayed: true; the handler does
//     not run.
//   - A repeat with another fingerprint gets 422 idempotency_key_reused.
//   - A repeat while the first still runs waits for it, at most WaitTimeout
//     (plus one store call in flight), and then gets its result or 409
//     idempotency_request_in_progress with Retry-After.
//   - A 5xx, an error, a panic or runtime.Goexit records a failure: repeats
//     get 409 idempotency_previous_failed until LockTimeout has passed.
//   - Completed records expire after DefaultTTL (NeverExpire keeps them).
//
// # Correctness under failure
//
// The in-progress record is a lease of LockTimeout, renewed while the handler
// runs; only its owner may complete it, and a takeover of an expired lease
// raises the fencing token (FencingToken(ctx)) that downstream writes can
// check. Lease arithmetic uses Redis's clock. Every key has an expiry. When
// Redis cannot be reached, ErrorPolicy decides: fail-closed answers 500
// idempotency_store_unavailable, fail-open runs the handler unprotected and
// logs a warning. Scope (a tenant or user) is part of the Redis key, and no
// two (scope, key) pairs share one.
//
// # Errors
//
// The errors (IdempotencyFingerprintMismatchError and the others) embed
// redisfx.BaseError and are plain Go errors; the module registers
// DefaultErrorFilter in httpfx's chain to turn them into problem+json.
// Change how they look by decorating ErrorFilter with fx.Decorate.
//
// # Work that is not HTTP
//
// Service.Do and Service.DoInScope give a message consumer or a job the
// same guarantee for a function's result.
//
// docs/idempotency.md in the repository states every rule, the record and
// key layout in Redis, and each decision behind them.
package idempotencyfx
