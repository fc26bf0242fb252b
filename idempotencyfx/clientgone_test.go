package idempotencyfx

import (
	"net"
	"net/http"
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
