// Package ratelimitfx is a Redis rate limiter as an Fx module, exact under
// concurrency across processes: each check is one atomic script on one key
// (a fixed window, or a sliding log) on Redis's clock, and distinct rules
// never share a counter. It offers chi middleware with per-route rules
// keyed by client IP (trusted-proxy aware), user, header or any function,
// answering with the RateLimit and RateLimit-Policy fields of
// draft-ietf-httpapi-ratelimit-headers-11 and, over the limit, 429
// problem+json with Retry-After (through an error filter), and a
// programmatic Check. Checks are traced (rate_limit.check) and measured
// (ratelimit_requests_total{status}, ratelimit_allowed_total,
// ratelimit_rejected_total).
//
// # Getting started
//
//	fx.New(
//		storefx.Module, httpfx.Module, ratelimitfx.Module,
//		fx.Supply(ratelimitfx.Config{Limit: 100, Window: time.Minute}), // optional
//		fx.Provide(httpfx.AsRoutes(func(l *ratelimitfx.Limiter) httpfx.Routes {
//			return func(r chi.Router) { r.With(l.Limit(ratelimitfx.Rule{Name: "api"})).Get("/x", h) }
//		})),
//	)
//
// Without Fx, New(rdb, cfg, opts...). Zero Config fields take their
// defaults; an invalid one fails start-up with a redisfx.ConfigError
// naming it.
//
// # The Redis client
//
// The module needs a Redis client (storefx.Module); without one start-up
// fails saying so. New refuses a go-redis client built without
// ContextTimeoutEnabled: go-redis would ignore context deadlines, and
// StoreTimeout could not bound a check. storefx's clients have it.
//
// # Traces and keys
//
// A check's key is often personal data (a client's IP address, a user
// id). Spans, error messages and logs carry it as Config.KeyAttribute
// says: redacted by default, or a keyed digest with plugintrace.HashKey.
package ratelimitfx
