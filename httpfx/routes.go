package httpfx

import (
	"net/http"
	"sort"

	"github.com/go-chi/chi/v5"
	"go.uber.org/fx"
)

// Routes registers routes on the application's router. Modules and
// applications contribute them with AsRoutes, without knowing each other.
type Routes func(r chi.Router)

// RoutesGroup is the value group of Routes.
const RoutesGroup = "redisfx.http.routes"

// AsRoutes annotates a constructor of Routes so that its result joins the
// routes group:
//
//	fx.Provide(httpfx.AsRoutes(func(h *PaymentHandler) httpfx.Routes {
//		return func(r chi.Router) {
//			r.With(idempotencyfx.Idempotent()).Post("/payments", httpfx.HandlerFunc(h.Create).ServeHTTP)
//		}
//	}))
func AsRoutes(constructor any) any {
	return fx.Annotate(constructor, fx.ResultTags(`group:"`+RoutesGroup+`"`))
}

// Middleware is router-wide middleware contributed by a module. It runs
// inside the standard stack (request id, server span, access log, panic
// recovery), in ascending Order.
type Middleware struct {
	Name  string
	Order int
	Wrap  func(http.Handler) http.Handler
}

// MiddlewareGroup is the value group of Middleware.
const MiddlewareGroup = "redisfx.http.middleware"

// AsMiddleware annotates a constructor of Middleware so that its result
// joins the middleware group.
func AsMiddleware(constructor any) any {
	return fx.Annotate(constructor, fx.ResultTags(`group:"`+MiddlewareGroup+`"`))
}

func sortMiddleware(ms []Middleware) []Middleware {
	ms = append([]Middleware(nil), ms...)
	sort.SliceStable(ms, func(i, j int) bool {
		if ms[i].Order != ms[j].Order {
			return ms[i].Order < ms[j].Order
		}
		return ms[i].Name < ms[j].Name
	})
	return ms
}
