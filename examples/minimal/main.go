// Command minimal is the smallest real redisfx app:
// fx.New(idempotencyfx.Module, tracingfx.Module, …) plus what an app must
// add: a logger, the Redis connection and the HTTP server, and one route.
//
//	go run ./examples/minimal   # needs Redis on localhost:6379, or REDIS_URL
package main

import (
	"io"
	"net/http"

	"github.com/go-chi/chi/v5"
	"go.uber.org/fx"
	"go.uber.org/zap"

	"github.com/redisfx/redisfx/httpfx"
	"github.com/redisfx/redisfx/idempotencyfx"
	"github.com/redisfx/redisfx/storefx"
	"github.com/redisfx/redisfx/tracingfx"
)

func main() {
	fx.New(Options()).Run()
}

// Options is the whole app.
func Options() fx.Option {
	return fx.Options(
		idempotencyfx.Module, tracingfx.Module, // idempotency and tracing
		storefx.Module, httpfx.Module, // the connection and the server they need
		fx.Provide(zap.NewProduction, storefx.FromEnvConfig), // a logger and REDIS_URL
		fx.Provide(httpfx.AsRoutes(func() httpfx.Routes {
			return func(r chi.Router) {
				r.With(idempotencyfx.Idempotent()).Post("/orders", func(w http.ResponseWriter, r *http.Request) {
					w.WriteHeader(http.StatusCreated)
					_, _ = io.WriteString(w, `{"status":"created"}`)
				})
			}
		})),
	)
}
