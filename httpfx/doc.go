// Package httpfx is the HTTP side of a redisfx application: a chi router and
// an http.Server that start and stop with the Fx app, problem+json errors, a
// SERVER span and an access log per request, route metrics, and /healthz,
// /readyz and /metrics.
//
//	fx.New(
//		httpfx.Module,
//		fx.Provide(zap.NewProduction), // the app owns its logger
//		fx.Provide(httpfx.AsRoutes(func(h *Handler) httpfx.Routes {
//			return func(r chi.Router) { r.Post("/orders", httpfx.HandlerFunc(h.Create).ServeHTTP) }
//		})),
//	)
//
// Modules and the app contribute routes (AsRoutes), middleware
// (AsMiddleware), error filters (AsErrorFilter) and readiness checks
// (AsReadinessCheck) without knowing each other.
//
// Every request gets, outermost first: an X-Request-Id (RequestIDFromContext);
// a SERVER span "METHOD /route/pattern" when a trace.TracerProvider is in the
// graph; an access log line; http_requests_total and
// http_request_duration_seconds by route pattern ("unmatched" for no route)
// when a prometheus.Registerer is; panic recovery into a 500 problem; then
// the modules' middleware by Order.
//
// A HandlerFunc returns an error; the error filters map it to a Problem,
// written as application/problem+json (RFC 9457) with a stable "code". An
// error no filter knows is a 500 whose body never repeats the error text.
//
// The server listens on start (a taken port fails start-up) and drains
// in-flight requests on stop, before Redis closes and spans are flushed.
// /readyz runs every storefx client's check and the app's; /metrics serves
// the prometheus.Gatherer of metricsfx.Module, and is not served without it.
package httpfx
