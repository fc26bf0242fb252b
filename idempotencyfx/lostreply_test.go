package idempotencyfx

import (
	"context"
	"testing"
	"time"

	"github.com/redisfx/redisfx/internal/faultproxy"
	"github.com/redisfx/redisfx/internal/redistest"
)

// lostReplyEnv is an idempotent route whose Redis sits behind a fault
// proxy, for the tests of claims whose reply is lost.
type lostReplyEnv struct {
	*env
	srv   *redistest.Server
	proxy *faultproxy.Proxy
}

func newLostReplyEnv(t *testing.T, cfg Config) *lostReplyEnv {
	t.Helper()
	srv := redistest.StartPrivate(t)
	p := faultproxy.Start(t, srv.Addr())
	e := newEnvAt(t, cfg, srv, "redis://"+p.Addr())
	if r := e.post("/payments", "warm", `{}`); r.status != 201 {
		t.Fatalf("warm-up: %d", r.status)
	}
	return &lostReplyEnv{env: e, srv: srv, proxy: p}
}

// claimLandedReplyHeld posts key while Redis sleeps, so that its claim
// waits in Redis's socket; freezes the app's command connections, so that
// the reply is held once Redis wakes; and returns when Redis has run the
// claim (the record is in progress): the frozen connections, and the
// channel of the request's answer.
func (l *lostReplyEnv) claimLandedReplyHeld(t *testing.T, key string) ([]*faultproxy.Conn, <-chan reply) {
	t.Helper()
	woke := l.srv.Sleep(500 * time.Millisecond)
	before := l.proxy.Sent()
	first := make(chan reply, 1)
	go func() { first <- l.post("/payments", key, `{}`) }()
	// The claim is in Redis's socket: at least its script's 40-digit SHA
	// went out. (Any byte was once taken for it, but the client's health
	// probe sends a 14-byte PING every second: the connections were then
	// frozen before the claim was sent, and Redis never ran it.)
	waitFor(t, func() bool { return l.proxy.Sent() >= before+40 })
	var held []*faultproxy.Conn
	for _, c := range l.proxy.Conns() {
		if !c.Subscriber() {
			c.SetMode(faultproxy.Freeze)
			held = append(held, c)
		}
	}
	<-woke
	admin, rk := l.srv.Client(), l.svc.StoreKey("", key)
	waitFor(t, func() bool { return admin.HGet(context.Background(), rk, "s").Val() == "p" }) // Redis ran it
	return held, first
}

// breakerClosed waits until the client's circuit breaker lets commands
// through again (its probe found Redis).
func (l *lostReplyEnv) breakerClosed(t *testing.T) {
	t.Helper()
	waitFor(t, func() bool { return !breakerOpen(l.env) })
}
