package httpfx

import (
	"cmp"
	"net/http"
	"slices"
	"strings"

	"github.com/go-chi/chi/v5"
	"go.uber.org/fx"
)

// Routes registers routes on the application's router (see AsRoutes).
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

// Middleware is router-wide middleware, run inside the standard stack in
// ascending Order.
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

// ordered returns a copy of items sorted by Order, then Name.
func ordered[T any](items []T, key func(T) (order int, name string)) []T {
	out := slices.Clone(items)
	slices.SortStableFunc(out, func(a, b T) int {
		ao, an := key(a)
		bo, bn := key(b)
		return cmp.Or(cmp.Compare(ao, bo), strings.Compare(an, bn))
	})
	return out
}

func middlewareOrder(m Middleware) (int, string) { return m.Order, m.Name }
