package idempotencyfx_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	"go.uber.org/zap"

	"github.com/redisfx/redisfx/httpfx"
	"github.com/redisfx/redisfx/idempotencyfx"
	"github.com/redisfx/redisfx/internal/redistest"
	"github.com/redisfx/redisfx/storefx"
)

// A handler whose payment step runs under its own key (Service.Do) meets an
// earlier failed attempt of that step: it answers 409
// idempotency_previous_failed with Retry-After. Found by an adversary: that
// 409 was recorded as the route key's completed outcome, so every retry it
// invited got the 409 replayed, until DefaultTTL (an hour here), and the
// handler never ran again. It is a failure of the route's work now: its
// record expires after LockTimeout, and the retry runs the handler.
func TestNestedRetryLater_IsAFailureOfTheOuterWork(t *testing.T) {
	srv := redistest.StartPrivate(t)
	var server *httpfx.Server
	var svc *idempotencyfx.Service
	var calls atomic.Int64
	const lockTimeout = time.Second
	app := fxtest.New(t,
		fx.NopLogger,
		fx.Provide(zap.NewNop),
		fx.Supply(&storefx.Config{URL: srv.URL()}),
		fx.Supply(&idempotencyfx.Config{KeyPrefix: redistest.Prefix(t), DefaultTTL: time.Hour, LockTimeout: lockTimeout}),
		fx.Supply(&httpfx.Config{Addr: "127.0.0.1:0"}),
		storefx.Module, idempotencyfx.Module, httpfx.Module,
		fx.Provide(httpfx.AsRoutes(func(s *idempotencyfx.Service) httpfx.Routes {
			return func(r chi.Router) {
				r.With(idempotencyfx.Idempotent()).Method(http.MethodPost, "/orders", httpfx.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
					calls.Add(1)
					out, _, err := s.Do(r.Context(), "charge-order-7", "card-4242", func(context.Context) ([]byte, error) {
						return []byte("charged"), nil
					})
					if err != nil {
						return err
					}
					_, err = w.Write(out)
					return err
				}))
			}
		})),
		fx.Populate(&server, &svc),
	)
	app.RequireStart()
	defer app.RequireStop()

	// An earlier attempt of the charge step failed.
	if _, _, err := svc.Do(context.Background(), "charge-order-7", "card-4242", func(context.Context) ([]byte, error) {
		return nil, errors.New("card network timeout")
	}); err == nil {
		t.Fatal("the premise: the inner step fails")
	}
	post := func() (int, http.Header, string) {
		req, _ := http.NewRequest(http.MethodPost, server.URL()+"/orders", nil)
		req.Header.Set("Idempotency-Key", "order-7-create")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, string(b)
	}
	status, header, body := post()
	if status != http.StatusConflict || header.Get("Retry-After") == "" {
		t.Fatalf("first answer %d Retry-After=%q %s, want the inner 409 with Retry-After", status, header.Get("Retry-After"), body)
	}
	rec, err := svc.Get(context.Background(), "", "order-7-create")
	if err != nil || rec == nil {
		t.Fatalf("outer record: %v %v", rec, err)
	}
	if rec.State != idempotencyfx.StateFailed || rec.TTL > lockTimeout {
		t.Fatalf("outer record %s with TTL %v, want failed for at most LockTimeout (%v)", rec.State, rec.TTL, lockTimeout)
	}
	// Both failed records expire after LockTimeout; then the retry runs
	// the handler, whose step now succeeds.
	deadline := time.Now().Add(10 * lockTimeout)
	for {
		outer, _ := svc.Get(context.Background(), "", "order-7-create")
		inner, _ := svc.Get(context.Background(), "", "charge-order-7")
		if outer == nil && inner == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("failed records still there after %v: %+v %+v", 10*lockTimeout, outer, inner)
		}
		time.Sleep(20 * time.Millisecond) // polling Redis's expiry: no signal exists for it
	}
	status, header, body = post()
	if status != http.StatusOK || body != "charged" || header.Get(idempotencyfx.ReplayedHeader) != "" {
		t.Fatalf("retry after the failure expired: %d replayed=%q %s, want the handler run afresh", status, header.Get(idempotencyfx.ReplayedHeader), body)
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("handler ran %d times, want 2", n)
	}
}
