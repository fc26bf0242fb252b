// Package redisfx is the root of a set of Uber Fx modules that give Go
// services Redis-backed HTTP request idempotency, OpenTelemetry tracing and
// Prometheus metrics on chi.
//
// The modules live in their own packages:
//
//   - storefx: the Redis connection ([github.com/redis/go-redis/v9.UniversalClient]).
//   - idempotencyfx: exactly-once request handling for routes marked Idempotent().
//   - tracingfx: the TracerProvider, Redis command spans and the TRACING_SERVICE.
//   - httpfx: the chi router, the http.Server, problem+json errors, health and metrics.
//
// This package holds only what every module shares: the common base error, BaseError.
package redisfx
