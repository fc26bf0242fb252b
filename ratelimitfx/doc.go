// Package ratelimitfx is a Redis rate limiter as an Fx module, exact across
// processes: each check is one atomic script on one key (a fixed window or
// a sliding log) on Redis's clock, and distinct rules never share a
// counter. It offers chi middleware with per-route rules keyed by client IP
// (trusted-proxy aware), user, header or any function, answering with the
// RateLimit and RateLimit-Policy fields of
// draft-ietf-httpapi-ratelimit-headers-11 and, over the limit, 429
// problem+json with Retry-After; and a programmatic Check. Add
// storefx.Module and ratelimitfx.Module, optionally a Config; without Fx,
// New(rdb, cfg, opts...). Keys appear in spans and logs as
// Config.KeyAttribute says (redacted by default). See docs/rate-limit.md.
package ratelimitfx
