package httpfx_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/go-chi/chi/v5"
	"go.uber.org/fx"
	"go.uber.org/zap"

	"github.com/redisfx/redisfx/httpfx"
)

// Handlers may return errors; a ProblemError becomes its problem response.
func ExampleHandlerFunc() {
	h := httpfx.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		return &httpfx.ProblemError{Problem: httpfx.NewProblem(http.StatusBadRequest, "invalid_amount", "amount must be positive")}
	})
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("POST", "/payments", nil))
	fmt.Println(w.Code, w.Header().Get("Content-Type"), w.Header().Get("Cache-Control"))
	fmt.Print(w.Body.String())
	// Output:
	// 400 application/problem+json no-store
	// {"type":"about:blank","title":"Bad Request","status":400,"detail":"amount must be positive","code":"invalid_amount"}
}

// tenantsKey is the context key of the example's directory.
type tenantsKey struct{}

// A module hands its routes an object of the app through every request's
// context, without a middleware that copies each request.
func ExampleAsContextValue() {
	tenants := map[string]string{"acme": "ACME Corp"}
	var mux *chi.Mux
	app := fx.New(fx.NopLogger,
		fx.Supply(zap.NewNop(), &httpfx.Config{Addr: "127.0.0.1:0"}),
		httpfx.Module,
		fx.Provide(httpfx.AsContextValue(func() httpfx.ContextValue {
			return httpfx.ContextValue{Key: tenantsKey{}, Value: tenants}
		})),
		fx.Provide(httpfx.AsRoutes(func() httpfx.Routes {
			return func(r chi.Router) {
				r.Get("/tenants/{id}", func(w http.ResponseWriter, r *http.Request) {
					dir, _ := r.Context().Value(tenantsKey{}).(map[string]string)
					fmt.Fprintln(w, dir[chi.URLParam(r, "id")])
				})
			}
		})),
		fx.Populate(&mux),
	)
	if err := app.Err(); err != nil {
		fmt.Println(err)
		return
	}
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/tenants/acme", nil))
	fmt.Print(w.Body.String())
	// Output:
	// ACME Corp
}
