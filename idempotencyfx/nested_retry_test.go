package idempotencyfx_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/redisfx/redisfx/httpfx"
	"github.com/redisfx/redisfx/idempotencyfx"
)

// A handler whose payment step runs under its own key (Service.Do) meets an
// earlier failed attempt of that step: it answers, through httpfx's error
// chain, 409 idempotency_previous_failed with Retry-After. Found by an
// adversary: that 409 was recorded as the route key's completed outcome, so
// every retry it invited got the 409 replayed, until DefaultTTL (an hour
// here), and the handler never ran again. It is a failure of the route's
// work now: its record expires after LockTimeout, and the retry runs the
// handler.
func TestNestedRetryLater_IsAFailureOfTheOuterWork(t *testing.T) {
	const lockTimeout = time.Second
	errs := httpfx.NewErrors(nil, httpfx.RegisteredErrorFilter{Name: "idempotency", Filter: httpfx.ErrorFilter(idempotencyfx.DefaultErrorFilter)})
	var svc *idempotencyfx.Service
	e := advNew(t, idempotencyfx.Config{DefaultTTL: time.Hour, LockTimeout: lockTimeout}, func(w http.ResponseWriter, r *http.Request) {
		out, _, err := svc.Do(r.Context(), "charge-order-7", "card-4242", func(context.Context) ([]byte, error) {
			return []byte("charged"), nil
		})
		if err != nil {
			errs.Render(w, r, err)
			return
		}
		_, _ = w.Write(out)
	}, nil)
	svc = e.svc

	// An earlier attempt of the charge step failed.
	if _, _, err := svc.Do(context.Background(), "charge-order-7", "card-4242", func(context.Context) ([]byte, error) {
		return nil, errors.New("card network timeout")
	}); err == nil {
		t.Fatal("the premise: the inner step fails")
	}
	if r := e.do(t, "/p", "order-7-create", "", ""); r.status != http.StatusConflict || r.header.Get("Retry-After") == "" {
		t.Fatalf("first answer %d Retry-After=%q %s, want the inner 409 with Retry-After", r.status, r.header.Get("Retry-After"), r.body)
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
	if r := e.do(t, "/p", "order-7-create", "", ""); r.status != http.StatusOK || r.body != "charged" || r.header.Get(idempotencyfx.ReplayedHeader) != "" {
		t.Fatalf("retry after the failure expired: %d replayed=%q %s, want the handler run afresh", r.status, r.header.Get(idempotencyfx.ReplayedHeader), r.body)
	}
	if n := e.calls.Load(); n != 2 {
		t.Errorf("handler ran %d times, want 2", n)
	}
}
