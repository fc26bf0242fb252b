// Package redisfx is the root of a set of Uber Fx modules that give Go
// services on chi Redis-backed HTTP request idempotency, OpenTelemetry
// tracing and Prometheus metrics, and the Redis building blocks around them.
//
// The modules live in their own packages (storefx, idempotencyfx,
// tracingfx, httpfx, metricsfx, lockfx, cachefx, ratelimitfx, streamfx,
// plugintrace); an app takes the ones it needs. This package holds only
// what every module shares: BaseError and ConfigError.
//
// docs/architecture.md in the repository describes the packages, what each
// depends on, and the path of one request through them.
package redisfx
