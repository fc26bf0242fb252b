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
// docs/http.md describes the middleware stack, the errors and the probes.
package httpfx
