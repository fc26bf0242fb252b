package idempotencyfx

import (
	"context"
	"errors"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"
)

// tenantScope is the docs' scope function: the tenant header, "" when it is
// missing.
func tenantScope(r *http.Request) (string, error) { return r.Header.Get("X-Tenant-Id"), nil }

// Issue 14, item 1: a request without a tenant that sends the key
// "tenant-a:order-1" must not reach tenant-a's record of "order-1".
func TestScope_UnscopedKeyCannotReachTenantRecord(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{Scope: tenantScope}, nil)
	body := `{"amount":100}`
	a := e.post("/payments", "order-1", body, "X-Tenant-Id", "tenant-a")
	wantStatus(t, a, 201, "")
	intruder := e.post("/payments", "tenant-a:order-1", body)
	if intruder.header.Get(ReplayedHeader) == "true" || intruder.body == a.body {
		t.Fatalf("a request without a tenant received tenant-a's response: %s", intruder.body)
	}
	if n := e.calls.Load(); n != 2 {
		t.Fatalf("%d executions, want 2 (two different records)", n)
	}
	// And the other way round: the unscoped record first.
	first := e.post("/payments", "tenant-b:order-2", body)
	victim := e.post("/payments", "order-2", body, "X-Tenant-Id", "tenant-b")
	if victim.header.Get(ReplayedHeader) == "true" || victim.body == first.body {
		t.Fatalf("tenant-b received an unscoped request's response: %s", victim.body)
	}
}

// Service.Do is unscoped; its keys must not reach a tenant's records either.
func TestDo_CannotReachTenantRecord(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{Scope: tenantScope}, nil)
	body := `{"amount":100}`
	a := e.post("/payments", "order-1", body, "X-Tenant-Id", "tenant-a")
	wantStatus(t, a, 201, "")
	// The fingerprint the middleware computed for tenant-a's request.
	req, _ := http.NewRequest(http.MethodPost, "/payments", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	fp, _ := DefaultFingerprint(req, []byte(body))
	out, replayed, err := e.svc.Do(context.Background(), "tenant-a:order-1", fp, func(context.Context) ([]byte, error) {
		return []byte("own receipt"), nil
	})
	if err != nil || replayed || string(out) != "own receipt" {
		t.Fatalf("Do reached tenant-a's record: %q replayed=%v err=%v", out, replayed, err)
	}
}

// DoInScope shares the middleware's record of a scoped key.
func TestDoInScope_SharesTheMiddlewaresRecord(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{Scope: tenantScope}, nil)
	body := `{"amount":100}`
	a := e.post("/payments", "order-1", body, "X-Tenant-Id", "tenant-a")
	req, _ := http.NewRequest(http.MethodPost, "/payments", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	fp, _ := DefaultFingerprint(req, []byte(body))
	out, replayed, err := e.svc.DoInScope(context.Background(), "tenant-a", "order-1", fp, func(context.Context) ([]byte, error) {
		t.Error("ran again")
		return nil, nil
	})
	if err != nil || !replayed || string(out) != a.body {
		t.Fatalf("DoInScope: %q replayed=%v err=%v, want tenant-a's replay %q", out, replayed, err, a.body)
	}
}

// StoreKey is injective: no two (scope, key) pairs share a Redis key,
// whatever characters they use.
func TestStoreKey_Injective(t *testing.T) {
	t.Parallel()
	parts := []string{"", "a", "b", ":", "a:", ":b", "a:b", "%", "%3A", "%25", "a%3Ab", "+", " ", "%2B", "{x}", "a::b"}
	seen := map[string][2]string{}
	for _, scope := range parts {
		for _, k1 := range parts {
			for _, k2 := range parts {
				key := k1 + k2
				if key == "" {
					continue
				}
				sk := storeKey(DefaultKeyPrefix, scope, key)
				if prev, ok := seen[sk]; ok && prev != [2]string{scope, key} {
					t.Fatalf("(%q, %q) and (%q, %q) share the Redis key %q", prev[0], prev[1], scope, key, sk)
				}
				seen[sk] = [2]string{scope, key}
			}
		}
	}
}

// Issue 14, item 4: a handler that leaves through runtime.Goexit (what
// t.FailNow does) still ends its lease and records a failure, so retries
// get previous_failed instead of in_progress for ever.
func TestHandlerGoexit_RecordsFailureAndEndsLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{NoWait: true, LockTimeout: 300 * time.Millisecond}, nil)
	e.setHandler(func(http.ResponseWriter, *http.Request) { runtime.Goexit() })
	if r := e.post("/payments", "goexit", `{}`); r.status != -1 {
		t.Fatalf("the client got an answer from a handler that exited: %d %s", r.status, r.body)
	}
	// net/http closes the connection after the deferred finish has run, so
	// the record is final by now.
	if rec := e.record("goexit"); rec == nil || rec.State != StateFailed {
		t.Fatalf("record after Goexit = %+v, want failed", rec)
	}
	wantStatus(t, e.post("/payments", "goexit", `{}`), 409, CodePreviousFailed)
}

// The same for Service.Do.
func TestDoGoexit_RecordsFailureAndEndsLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{NoWait: true, LockTimeout: 300 * time.Millisecond}, nil)
	ctx := context.Background()
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		_, _, _ = e.svc.Do(ctx, "goexit", "fp", func(context.Context) ([]byte, error) {
			runtime.Goexit()
			return nil, nil
		})
	}()
	<-exited
	_, _, err := e.svc.Do(ctx, "goexit", "fp", func(context.Context) ([]byte, error) { return nil, nil })
	var failed *IdempotencyFailedError
	if !errors.As(err, &failed) {
		t.Fatalf("Do after a Goexit: %v, want IdempotencyFailedError", err)
	}
}
