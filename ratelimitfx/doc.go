// Package ratelimitfx is a Redis rate limiter as an Fx module, exact across
// processes: chi middleware with per-route rules and a programmatic Check.
// Add storefx.Module and ratelimitfx.Module, optionally a Config; without
// Fx, New(rdb, cfg, opts...). See docs/rate-limit.md.
package ratelimitfx
