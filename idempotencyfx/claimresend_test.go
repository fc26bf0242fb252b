package idempotencyfx

import (
	"io"
	"net"
	"testing"
	"time"
)

// The claim reaches Redis and runs; its connection fails (reset) before the
// reply arrives. go-redis (MaxRetries 3 by default) sends the claim again on
// a new connection with the same owner token, and it finds the record in
// progress for that very owner: the claim script grants it again, and the
// request runs. (Found by an adversary: the re-sent claim took its own
// record for another's run, the request got 409, and so did every retry
// until the lease ended, with nothing running.)
func TestClaimConnReset_GoRedisResendsTheClaim_GrantedAgain(t *testing.T) {
	l := newLostReplyEnv(t, Config{NoWait: true, StoreTimeout: 2 * time.Second, LockTimeout: 30 * time.Second})
	held, first := l.claimLandedReplyHeld(t, "k")
	for _, c := range held {
		c.Cut()
	}
	if r := <-first; r.status != 201 {
		r2 := l.post("/payments", "k", `{}`)
		t.Fatalf("first request %d %s; its retry once Redis answers: %d %s (runs so far %d)", r.status, r.body, r2.status, r2.body, l.calls.Load())
	}
}

// As above, but go-redis's re-sends are refused at dial (the proxy refuses
// new connections, as a restarting server would): the claim ends with a
// dial error, though its first send landed. It must still be withdrawn, so
// that the retry, once Redis answers, runs. (Found by an adversary: a
// refused dial was taken for "nothing was sent".)
func TestClaimConnReset_ResendsRefusedAtDial_Withdrawn(t *testing.T) {
	l := newLostReplyEnv(t, Config{NoWait: true, StoreTimeout: 2 * time.Second, LockTimeout: 30 * time.Second})
	_, first := l.claimLandedReplyHeld(t, "k")
	addr := l.proxy.Addr()
	l.proxy.Close() // closes the listener (new dials are refused) and cuts the connections
	r := <-first
	ln, err := net.Listen("tcp", addr) // Redis reachable again at the same address
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", l.srv.Addr())
			if err != nil {
				_ = c.Close()
				continue
			}
			go func() { _, _ = io.Copy(s, c); _ = s.Close() }()
			go func() { _, _ = io.Copy(c, s); _ = c.Close() }()
		}
	}()
	l.svc.late.running.Wait() // the withdrawal landed
	l.breakerClosed(t)
	if r2 := l.post("/payments", "k", `{}`); r2.status != 201 {
		t.Fatalf("first request %d; its retry once Redis answers: %d %s (handler runs so far %d, the warm-up's)", r.status, r2.status, r2.body, l.calls.Load())
	}
}
