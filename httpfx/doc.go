// Package httpfx is the HTTP side of a redisfx application: a chi router and
// an http.Server that start and stop with the Fx app, problem+json errors, a
// SERVER span and an access log per request, route metrics, and the health,
// readiness and metrics endpoints.
//
// # Getting started
//
//	fx.New(
//		httpfx.Module,
//		fx.Provide(zap.NewProduction), // the app owns its logger
//		fx.Provide(httpfx.AsRoutes(func(h *Handler) httpfx.Routes {
//			return func(r chi.Router) { r.Post("/orders", httpfx.HandlerFunc(h.Create).ServeHTTP) }
//		})),
//	)
//
// Modules and the app contribute routes (AsRoutes), router-wide middleware
// (AsMiddleware), error filters (AsErrorFilter) and readiness checks without
// knowing each other; the Config (by value or by pointer) sets the address
// and timeouts.
//
// # What every request gets
//
// In this order, outermost first: an X-Request-Id (the client's, when well
// formed, else a new one; handlers read it with RequestIDFromContext); a
// SERVER span named "METHOD /route/pattern" with http.route when a
// trace.TracerProvider is in the graph (tracingfx); the access log line with
// the trace and span ids; http_requests_total and
// http_request_duration_seconds by route pattern (never by raw path, so the
// label set stays bounded: unmatched requests count as "unmatched"); panic
// recovery into a 500 problem; then the modules' middleware by Order.
//
// # Errors are problems
//
// A handler written as a HandlerFunc returns an error instead of writing one.
// The error goes through the chain of error filters (each maps the errors it
// knows to a Problem: idempotencyfx's first, the app's after) and is written
// as application/problem+json (RFC 9457) with a stable "code" member,
// Cache-Control: no-store and, where it helps, Retry-After. An error no
// filter knows becomes a 500 whose body never repeats the error text; the
// text is logged instead. Errors stay plain Go errors until the filter: the
// same error works in a message consumer.
//
// # Lifecycle
//
// On start the server listens synchronously (a taken port fails start-up)
// and serves in a goroutine; a serve error stops the app. On stop it drains
// in-flight requests for at most Config.ShutdownTimeout. Because the server
// depends on the modules its routes use, Fx stops it first: requests drain,
// then Redis closes, then spans are flushed.
//
// # Endpoints
//
// /healthz answers 200 while the process runs; /readyz answers 200 when every
// readiness check (every storefx client, and the app's own) passes, else 503
// as a problem (code CodeNotReady) naming the failed checks; /metrics serves
// the metricsfx registry. Each can be switched off in Config.
package httpfx
