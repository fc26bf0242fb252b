package idempotencyfx_test

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"
	"go.uber.org/fx"
	"go.uber.org/zap"

	"github.com/redisfx/redisfx/httpfx"
	"github.com/redisfx/redisfx/idempotencyfx"
	"github.com/redisfx/redisfx/storefx"
)

// A route opts in with Idempotent(), which takes no arguments.
func ExampleIdempotent() {
	routes := func(r chi.Router) {
		r.With(idempotencyfx.Idempotent()).Post("/payments", func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusCreated)
		})
	}
	_ = fx.New(
		fx.Provide(zap.NewProduction),
		storefx.Module, idempotencyfx.Module, httpfx.Module,
		fx.Supply(&idempotencyfx.Config{DefaultTTL: 48 * time.Hour, ErrorPolicy: idempotencyfx.FailClosed}),
		fx.Provide(httpfx.AsRoutes(func() httpfx.Routes { return routes })),
	)
}

// Work that is not HTTP, such as a message consumer, uses the Service.
func ExampleService_Do() {
	var svc *idempotencyfx.Service // injected by idempotencyfx.Module
	handle := func(ctx context.Context, messageID, payload string) error {
		receipt, replayed, err := svc.Do(ctx, messageID, payload, func(ctx context.Context) ([]byte, error) {
			return []byte("charged " + payload), nil // runs at most once per message id
		})
		if err != nil {
			return err
		}
		fmt.Println(string(receipt), replayed)
		return nil
	}
	_ = handle
}

// Keys are validated before any Redis call; RFC 8941 quoted keys are unquoted.
func ExampleParseKey() {
	k, err := idempotencyfx.ParseKey([]string{`"8e03978e-40d5"`})
	fmt.Println(k, err)
	_, err = idempotencyfx.ParseKey([]string{"has space"})
	fmt.Println(err)
	// Output:
	// 8e03978e-40d5 <nil>
	// the idempotency key must be visible ASCII characters only
}

// Volatile fields are left out of the fingerprint.
func ExampleIgnoreJSONFields() {
	fp := idempotencyfx.IgnoreJSONFields("sent_at", "meta.request_id")
	a, _ := http.NewRequest("POST", "/orders", nil)
	a.Header.Set("Content-Type", "application/json")
	x, _ := fp(a, []byte(`{"sku":"A1","sent_at":"10:00","meta":{"request_id":"r1"}}`))
	y, _ := fp(a, []byte(`{"meta":{"request_id":"r2"},"sent_at":"10:05","sku":"A1"}`))
	fmt.Println(x == y)
	// Output: true
}
