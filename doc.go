// Package redisfx is the root of a set of Uber Fx modules that give Go
// services on chi Redis-backed HTTP request idempotency, OpenTelemetry
// tracing and Prometheus metrics, and the Redis building blocks around them.
//
// The modules live in their own packages; an app takes the ones it needs:
//
//   - storefx: the Redis connection, a [github.com/redis/go-redis/v9.UniversalClient]
//     (standalone, Sentinel or Cluster), checked at start and closed at stop.
//   - idempotencyfx: routes marked Idempotent() run their handler once per
//     idempotency key; retries get the recorded response.
//   - tracingfx: the TracerProvider and exporter, redis.<COMMAND> spans,
//     plugin spans and the ITracingService named TRACING_SERVICE.
//   - httpfx: the chi router and http.Server, problem+json errors, SERVER
//     spans, access log, /healthz and /readyz; with metricsfx, route metrics
//     and /metrics.
//   - metricsfx: the app's Prometheus registry (redisfx metrics named
//     <prefix>_<name>), and the alert rules.
//   - lockfx: a distributed lock with renewal and fencing tokens.
//   - cachefx: a cache with namespaces, tags, stampede-safe loading and an
//     optional in-process first layer.
//   - ratelimitfx: an exact rate limiter across processes, as chi middleware.
//   - streamfx: Redis Streams consumer groups with retries, reclaim and a
//     dead-letter stream.
//   - plugintrace: the span helper and attribute keys the modules above share
//     (OpenTelemetry API only).
//
// This package holds only what every module shares: BaseError, the base of
// every error the modules define, and ConfigError, the error of an invalid
// configuration. Errors are plain Go errors, not HTTP responses: httpfx's
// error filters turn them into problem+json answers, so the same error works
// in a message consumer or a CLI.
//
// docs/architecture.md in the repository draws the packages, what each
// depends on, and the path of one request through them.
package redisfx
