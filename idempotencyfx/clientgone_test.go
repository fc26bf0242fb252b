package idempotencyfx

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/redisfx/redisfx/httpfx"
	"github.com/redisfx/redisfx/internal/redistest"
)

// A handler whose work honours the request's context returns
// context.Canceled when the client leaves. That is a failed outcome, as any
// handler error is: retries get 409 idempotency_previous_failed, not an
// empty 200 replayed for DefaultTTL. (Found by an adversary: httpfx wrote
// nothing for a client that had gone, so the recorder saw an implicit 200
// and recorded it as the completed answer.)
func TestClientGoneDuringHandler_ErrorRecordedAsFailed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{LockTimeout: 2 * time.Second}, redistest.Start(t))
	g := newGate(t)
	e.setHandler(httpfx.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		e.calls.Add(1)
		g.enter.Do(func() { close(g.entered) })
		<-r.Context().Done() // the charge honours the request's context, as a database call does
		return r.Context().Err()
	}).ServeHTTP)

	c, err := net.Dial("tcp", e.http.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	body := `{"amount":1}`
	if _, err := c.Write([]byte("POST /payments HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nIdempotency-Key: k\r\n" +
		"Content-Length: " + itoa(int64(len(body))) + "\r\n\r\n" + body)); err != nil {
		t.Fatal(err)
	}
	g.waitEntered(t)
	_ = c.Close() // the client gives up while the charge runs
	waitFor(t, func() bool { s := recordState(e, "k"); return s != "" && s != StateInProgress })

	if rec := e.record("k"); rec.State != StateFailed || rec.TTL > 2*time.Second {
		t.Fatalf("record %s (TTL %v), want failed for LockTimeout", rec.State, rec.TTL)
	}
	wantStatus(t, e.post("/payments", "k", body), http.StatusConflict, CodePreviousFailed)
	if n := e.calls.Load(); n != 1 {
		t.Fatalf("handler ran %d times", n)
	}
}

// A handler error that arrives after the answer began (a status or part of
// the body written, then an error returned, perhaps because the client
// left) is a failed outcome, never the answer begun: the recorder holds the
// response back, so nothing had reached the client, but it kept the first
// status and httpfx's error status came second (found by an adversary:
// such answers were replayed for DefaultTTL). An invalid status is a panic,
// as net/http makes it, so a failure too. An answer that had already
// passed through to the client (flushed, or written on a hijacked
// connection) is not held back: the client may have acted on it, so the
// record is not replayable and the handler never runs again
// (TestAnswerPassedThroughThenFailure_NeverRunsAgain; before, these were
// failed, and a retry after LockTimeout ran the handler again).
func TestHandlerErrorAfterTheAnswerBegan_RecordedAsFailed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{LockTimeout: 2 * time.Second}, redistest.Start(t))
	cases := []struct {
		name     string
		handler  http.HandlerFunc
		answered bool // part of the answer reached the client before the error
	}{
		{"partial body, then an error", httpfx.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) error {
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write([]byte(`{"id":`))
			return errors.New("commit failed")
		}).ServeHTTP, false},
		{"a status, then an error", httpfx.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) error {
			w.WriteHeader(http.StatusCreated)
			return errors.New("commit failed")
		}).ServeHTTP, false},
		{"streamed, then an error", httpfx.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) error {
			_, _ = w.Write([]byte(`{"id":`))
			w.(http.Flusher).Flush()
			return errors.New("commit failed")
		}).ServeHTTP, true},
		{"a 5xx after a 201", func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusCreated)
			w.WriteHeader(http.StatusBadGateway)
		}, false},
		{"hijacked, answered, then an error", httpfx.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) error {
			conn, bw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return err
			}
			_, _ = bw.WriteString("HTTP/1.1 201 Created\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
			_ = bw.Flush()
			_ = conn.Close()
			return errors.New("commit failed after the hijacked answer")
		}).ServeHTTP, true},
		{"an invalid status", func(w http.ResponseWriter, _ *http.Request) {
			var upstreamStatus int // the upstream call failed: its status is the zero value
			w.WriteHeader(upstreamStatus)
			_, _ = w.Write([]byte(`{"charged":true}`))
		}, false},
	}
	for i, c := range cases {
		key := "k" + itoa(int64(i))
		e.setHandler(c.handler)
		e.post("/payments", key, `{}`)
		// A hijacking handler's client has its answer before the handler
		// returns: wait for the outcome.
		waitFor(t, func() bool { s := recordState(e, key); return s != "" && s != StateInProgress })
		if c.answered {
			if rec := e.record(key); rec.State != StateNotReplayable {
				t.Fatalf("%s: recorded %s (TTL %v), want not replayable", c.name, rec.State, rec.TTL)
			}
			wantStatus(t, e.post("/payments", key, `{}`), http.StatusConflict, CodeResponseNotStored)
			continue
		}
		if rec := e.record(key); rec.State != StateFailed || rec.TTL > 2*time.Second {
			t.Fatalf("%s: recorded %s (TTL %v), want failed for LockTimeout", c.name, rec.State, rec.TTL)
		}
		wantStatus(t, e.post("/payments", key, `{}`), http.StatusConflict, CodePreviousFailed)
	}
}

// A request that finds its client gone before it claims anything claims
// nothing, runs nothing, and answers 499 for the access log and metrics
// (nobody reads it), as a handler error of a client that left does.
func TestClientGoneBeforeTheClaim_NothingClaimed_499(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{}, redistest.Start(t))
	h := e.svc.Install(Idempotent()(e.handler))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/payments", strings.NewReader(`{}`))
	req.Header.Set("Idempotency-Key", "k")
	rr := httptest.NewRecorder()
	sent := e.cmds.n.Load()
	h.ServeHTTP(rr, req)
	if rr.Code != httpfx.StatusClientClosedRequest || rr.Body.Len() != 0 {
		t.Fatalf("answered %d %q, want a bare 499", rr.Code, rr.Body)
	}
	if e.calls.Load() != 0 || e.cmds.n.Load() != sent {
		t.Fatalf("the handler ran %d times, %d Redis commands sent", e.calls.Load(), e.cmds.n.Load()-sent)
	}
}
