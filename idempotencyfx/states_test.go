package idempotencyfx

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// One test per row of the state table (docs/idempotency.md, "The rules").

func TestState_None_RequestWithKey_RunsHandlerAndHoldsLock(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{}, nil)
	g := newGate(t)
	e.setHandler(func(w http.ResponseWriter, r *http.Request) {
		g.hold()
		w.WriteHeader(201)
	})
	done := make(chan reply)
	go func() { done <- e.post("/payments", "k1", `{"a":1}`) }()
	g.waitEntered(t)
	rec := e.record("k1")
	if rec == nil || rec.State != StateInProgress || rec.FencingToken <= 0 {
		t.Fatalf("while the handler runs, record = %+v, want in progress with token 1", rec)
	}
	if rec.TTL <= 0 {
		t.Fatalf("in-progress record has no expiry (TTL %v)", rec.TTL)
	}
	g.open()
	if r := <-done; r.status != 201 {
		t.Fatalf("status %d", r.status)
	}
}

func TestState_InProgress_HandlerReturns_Completed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{DefaultTTL: 2 * time.Hour}, nil)
	r := e.post("/payments", "k", `{"a":1}`)
	if r.status != 201 || e.calls.Load() != 1 {
		t.Fatalf("status %d calls %d", r.status, e.calls.Load())
	}
	rec := e.record("k")
	if rec.State != StateCompleted || rec.Response == nil || rec.Response.Status != 201 {
		t.Fatalf("record = %+v", rec)
	}
	if rec.TTL < 119*time.Minute || rec.TTL > 2*time.Hour {
		t.Fatalf("completed TTL = %v, want DefaultTTL 2h", rec.TTL)
	}
	if rec.LeaseLeft != 0 {
		t.Fatalf("lease not released: %v", rec.LeaseLeft)
	}
}

func TestState_InProgress_HandlerThrows_Failed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{LockTimeout: 5 * time.Second}, nil)
	e.setHandler(func(w http.ResponseWriter, r *http.Request) {
		e.calls.Add(1)
		w.WriteHeader(http.StatusBadGateway)
	})
	r := e.post("/payments", "k", `{}`)
	if r.status != http.StatusBadGateway {
		t.Fatalf("the caller must get the handler's error; status %d", r.status)
	}
	rec := e.record("k")
	if rec.State != StateFailed {
		t.Fatalf("state %v, want failed", rec.State)
	}
	if rec.TTL <= 4*time.Second || rec.TTL > 5*time.Second {
		t.Fatalf("failed TTL = %v, want LockTimeout 5s", rec.TTL)
	}
}

func TestState_InProgress_SecondRequest_WaitsThenGetsResult(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{}, nil)
	g := newGate(t)
	e.setHandler(func(w http.ResponseWriter, r *http.Request) {
		e.calls.Add(1)
		g.hold()
		w.Header().Set("X-Paid", "yes")
		w.WriteHeader(201)
		_, _ = w.Write([]byte("first"))
	})
	first := make(chan reply)
	go func() { first <- e.post("/payments", "k", `{}`) }()
	g.waitEntered(t)
	second := make(chan reply)
	go func() { second <- e.post("/payments", "k", `{}`) }()
	waitFor(t, func() bool { return e.recordHasWaiter("k") })
	g.open()
	r1, r2 := <-first, <-second
	if r1.status != 201 || r2.status != 201 || r2.body != "first" || r2.header.Get("X-Paid") != "yes" {
		t.Fatalf("first %+v second %+v", r1, r2)
	}
	if r2.header.Get(ReplayedHeader) != "true" || r1.header.Get(ReplayedHeader) != "" {
		t.Fatalf("replay header: first %q second %q", r1.header.Get(ReplayedHeader), r2.header.Get(ReplayedHeader))
	}
	if e.calls.Load() != 1 {
		t.Fatalf("handler ran %d times", e.calls.Load())
	}
}

func TestState_InProgress_SecondRequest_WaitTimeout_409(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{WaitTimeout: 100 * time.Millisecond}, nil)
	g := newGate(t)
	e.setHandler(func(w http.ResponseWriter, r *http.Request) {
		g.hold()
	})
	go e.post("/payments", "k", `{}`)
	g.waitEntered(t)
	defer g.open()
	r := e.post("/payments", "k", `{}`)
	wantStatus(t, r, 409, CodeInProgress)
	if r.header.Get("Retry-After") == "" || r.header.Get("Cache-Control") != "no-store" {
		t.Fatalf("headers %v", r.header)
	}
}

func TestState_Completed_SameFingerprint_Replayed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{}, nil)
	r1 := e.post("/payments", "k", `{"amount":1,"currency":"EUR"}`)
	r2 := e.post("/payments", "k", "{\n \"currency\": \"EUR\", \"amount\": 1}") // same JSON, other order
	if e.calls.Load() != 1 {
		t.Fatalf("handler ran %d times", e.calls.Load())
	}
	if r2.status != r1.status || r2.body != r1.body {
		t.Fatalf("replay differs: %+v vs %+v", r2, r1)
	}
	if got := r2.header.Values("X-Multi"); strings.Join(got, ",") != "a,b" {
		t.Fatalf("multi-value header = %v, want [a b] in order", got)
	}
	if r2.header.Get("Content-Type") != "application/json" || r2.header.Get(ReplayedHeader) != "true" {
		t.Fatalf("replayed headers %v", r2.header)
	}
	if r2.header.Get("Set-Cookie") != "" {
		t.Fatal("Set-Cookie must not be recorded by default")
	}
}

func TestState_Completed_DifferentFingerprint_422(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{}, nil)
	e.post("/payments", "k", `{"amount":1}`)
	r := e.post("/payments", "k", `{"amount":2}`)
	wantStatus(t, r, 422, CodeKeyReused)
	if e.calls.Load() != 1 {
		t.Fatal("handler ran for a mismatched request")
	}
}

func TestState_Failed_RequestSameKey_409UntilExpiry(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{LockTimeout: 300 * time.Millisecond}, nil)
	e.setHandler(func(w http.ResponseWriter, r *http.Request) {
		e.calls.Add(1)
		w.WriteHeader(500)
	})
	e.post("/payments", "k", `{}`)
	r := e.post("/payments", "k", `{}`)
	wantStatus(t, r, 409, CodePreviousFailed)
	if r.header.Get("Retry-After") == "" {
		t.Fatal("409 without Retry-After")
	}
	if e.calls.Load() != 1 {
		t.Fatal("handler ran again for a failed key")
	}
}

func TestState_Failed_Expiry_AllowsFreshAttempt(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{LockTimeout: 200 * time.Millisecond}, nil)
	fail := true
	e.setHandler(func(w http.ResponseWriter, r *http.Request) {
		e.calls.Add(1)
		if fail {
			w.WriteHeader(500)
			return
		}
		w.WriteHeader(201)
	})
	e.post("/payments", "k", `{}`)
	fail = false
	waitFor(t, func() bool { return e.record("k") == nil }) // Redis expires it after LockTimeout
	if r := e.post("/payments", "k", `{}`); r.status != 201 || e.calls.Load() != 2 {
		t.Fatalf("after expiry: status %d calls %d", r.status, e.calls.Load())
	}
}

func TestState_Completed_Expiry_RunsAgain(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{DefaultTTL: 200 * time.Millisecond}, nil)
	e.post("/payments", "k", `{}`)
	waitFor(t, func() bool { return e.record("k") == nil })
	e.post("/payments", "k", `{}`)
	if e.calls.Load() != 2 {
		t.Fatalf("handler ran %d times, want 2 after expiry", e.calls.Load())
	}
}

func TestState_FailedOrCompleted_ExplicitDeletion_CleanRetry(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{}, nil)
	e.post("/payments", "k", `{}`)
	existed, err := e.svc.Delete(context.Background(), "", "k")
	if err != nil || !existed {
		t.Fatalf("Delete = %v, %v", existed, err)
	}
	e.post("/payments", "k", `{}`)
	if e.calls.Load() != 2 {
		t.Fatalf("handler ran %d times, want 2 after deletion", e.calls.Load())
	}
}

// A waiter whose first request fails gets 409 previous_failed (docs/idempotency.md,
// "Decisions").
func TestWaiter_WhenFirstFails_Gets409PreviousFailed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{}, nil)
	g := newGate(t)
	e.setHandler(func(w http.ResponseWriter, r *http.Request) {
		g.hold()
		w.WriteHeader(500)
	})
	go e.post("/payments", "k", `{}`)
	g.waitEntered(t)
	second := make(chan reply)
	go func() { second <- e.post("/payments", "k", `{}`) }()
	waitFor(t, func() bool { return e.recordHasWaiter("k") })
	g.open()
	wantStatus(t, <-second, 409, CodePreviousFailed)
}

// A waiter whose client disconnects stops waiting at once.
func TestWaiter_ClientDisconnect_StopsWaiting(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{WaitTimeout: time.Minute}, nil)
	g := newGate(t)
	e.setHandler(func(w http.ResponseWriter, r *http.Request) {
		g.hold()
	})
	go e.post("/payments", "k", `{}`)
	g.waitEntered(t)
	defer g.open()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { e.postCtx(ctx, "/payments", "k", `{}`); close(done) }()
	waitFor(t, func() bool { return e.recordHasWaiter("k") })
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("waiter did not stop when its client left")
	}
	waitFor(t, func() bool { return e.svc.notify.topicCount() == 0 })
}

func (e *env) recordHasWaiter(key string) bool {
	n, _ := e.rdb.HExists(context.Background(), e.svc.StoreKey("", key), "w").Result()
	return n
}

// waitFor polls cond (the state lives in Redis, which has no signal to
// wait on) for up to 10s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Waiters are woken by the completion message, not by polling: with a
// poll interval far beyond WaitTimeout, only the notification can answer
// them in time. All waiters in the process share one subscription.
func TestWaiter_WokenByNotification_NotByPolling(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{WaitTimeout: 5 * time.Second, PollInterval: time.Hour}, nil)
	g := newGate(t)
	e.setHandler(func(w http.ResponseWriter, r *http.Request) {
		e.calls.Add(1)
		g.hold()
		w.WriteHeader(201)
	})
	go e.post("/payments", "k", `{}`)
	g.waitEntered(t)
	var wg sync.WaitGroup
	replies := make([]reply, 5)
	for i := range replies {
		wg.Add(1)
		go func() { defer wg.Done(); replies[i] = e.post("/payments", "k", `{}`) }()
	}
	waitFor(t, func() bool { return e.recordHasWaiter("k") && e.svc.notify.topicCount() == 1 })
	began := time.Now()
	g.open()
	wg.Wait()
	for i, r := range replies {
		if r.status != 201 || r.header.Get(ReplayedHeader) != "true" {
			t.Fatalf("waiter %d: %d %v", i, r.status, r.header)
		}
	}
	if took := time.Since(began); took > 10*time.Second {
		t.Fatalf("waiters answered after %v", took)
	}
	if e.calls.Load() != 1 {
		t.Fatal("handler ran more than once")
	}
}

// A completion message that arrives while the waiter's own poll is in
// flight is not lost: the poll (sent before the completion) says "in
// progress", and the message, delivered meanwhile, must still wake the
// waiter. With a poll interval far beyond WaitTimeout only that message
// can answer it in time. (Found in CI: the waiter took a fresh signal on
// every turn of its loop, dropping the one that had fired during the poll,
// and answered 409 after WaitTimeout.)
func TestWait_MessageDuringPoll_NotLost(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{WaitTimeout: 3 * time.Second, PollInterval: time.Hour}, nil)
	g := newGate(t)
	e.setHandler(func(w http.ResponseWriter, r *http.Request) {
		e.calls.Add(1)
		g.hold()
		w.WriteHeader(201)
	})
	first := make(chan reply, 1)
	go func() { first <- e.post("/payments", "k", `{}`) }()
	g.waitEntered(t)
	// The waiter's confirmation poll has been answered "in progress" when
	// this hook runs; before the waiter looks at its signal again, the
	// owner completes and the message reaches the notifier.
	var once sync.Once
	e.svc.onWaitPoll = func() {
		once.Do(func() {
			g.open()
			waitFor(t, func() bool { return e.record("k").State == StateCompleted && e.svc.notify.pendingSignals() == 0 })
		})
	}
	r := e.post("/payments", "k", `{}`)
	if r.status != 201 || r.header.Get(ReplayedHeader) != "true" {
		t.Fatalf("waiter: %d %v %s, want the replay", r.status, r.header, r.body)
	}
	if e.calls.Load() != 1 {
		t.Fatal("handler ran more than once")
	}
	<-first
}
