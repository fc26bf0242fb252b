package idempotencyfx

import (
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/redisfx/redisfx/internal/faultproxy"
	"github.com/redisfx/redisfx/internal/redistest"
)

// The claim reaches Redis and runs; its connection fails (reset) before the
// reply arrives. go-redis (MaxRetries 3 by default) sends the claim again on
// a new connection with the same owner token, and it finds the record in
// progress for that very owner: the claim script grants it again, and the
// request runs. (Found by an adversary: the re-sent claim took its own
// record for another's run, the request got 409, and so did every retry
// until the lease ended, with nothing running.)
func TestClaimConnReset_GoRedisResendsTheClaim_GrantedAgain(t *testing.T) {
	srv := redistest.StartPrivate(t)
	p := faultproxy.Start(t, srv.Addr())
	e := newEnvAt(t, Config{NoWait: true, StoreTimeout: 2 * time.Second, LockTimeout: 30 * time.Second}, srv, "redis://"+p.Addr())
	ctx := context.Background()
	admin := srv.Client()
	if r := e.post("/payments", "warm", `{}`); r.status != 201 {
		t.Fatalf("warm-up: %d", r.status)
	}
	slept := make(chan struct{})
	go func() { defer close(slept); _ = admin.Do(ctx, "DEBUG", "SLEEP", "0.5").Err() }()
	time.Sleep(50 * time.Millisecond)
	first := make(chan reply, 1)
	go func() { first <- e.post("/payments", "k", `{}`) }()
	time.Sleep(150 * time.Millisecond) // the claim waits in Redis's socket
	var held []*faultproxy.Conn
	for _, c := range p.Conns() {
		if !c.Subscriber() {
			c.SetMode(faultproxy.Freeze) // the reply, once Redis wakes, is held
			held = append(held, c)
		}
	}
	<-slept
	time.Sleep(200 * time.Millisecond) // Redis ran the claim; its reply is held
	for _, c := range held {
		c.Cut()
	}
	r := <-first
	t.Logf("first request: %d %s; record %+v", r.status, r.body, e.record("k"))
	if r.status != 201 {
		r2 := e.post("/payments", "k", `{}`)
		t.Fatalf("first request %d %s; its retry once Redis answers: %d %s (runs so far %d)", r.status, r.body, r2.status, r2.body, e.calls.Load())
	}
}

// As above, but go-redis's re-sends are refused at dial (the proxy refuses
// new connections, as a restarting server would): the claim ends with a
// dial error, though its first send landed. It must still be withdrawn, so
// that the retry, once Redis answers, runs. (Found by an adversary: a
// refused dial was taken for "nothing was sent".)
func TestClaimConnReset_ResendsRefusedAtDial_Withdrawn(t *testing.T) {
	srv := redistest.StartPrivate(t)
	p := faultproxy.Start(t, srv.Addr())
	e := newEnvAt(t, Config{NoWait: true, StoreTimeout: 2 * time.Second, LockTimeout: 30 * time.Second}, srv, "redis://"+p.Addr())
	ctx := context.Background()
	admin := srv.Client()
	if r := e.post("/payments", "warm", `{}`); r.status != 201 {
		t.Fatalf("warm-up: %d", r.status)
	}
	slept := make(chan struct{})
	go func() { defer close(slept); _ = admin.Do(ctx, "DEBUG", "SLEEP", "0.5").Err() }()
	time.Sleep(50 * time.Millisecond)
	first := make(chan reply, 1)
	go func() { first <- e.post("/payments", "k", `{}`) }()
	time.Sleep(150 * time.Millisecond)
	var held []*faultproxy.Conn
	for _, c := range p.Conns() {
		if !c.Subscriber() {
			c.SetMode(faultproxy.Freeze)
			held = append(held, c)
		}
	}
	<-slept
	time.Sleep(200 * time.Millisecond) // Redis ran the claim; its reply is held
	addr := p.Addr()
	p.Close() // closes the listener (new dials are refused) and cuts the connections
	_ = held
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
			s, err := net.Dial("tcp", srv.Addr())
			if err != nil {
				c.Close()
				continue
			}
			go func() { _, _ = io.Copy(s, c); s.Close() }()
			go func() { _, _ = io.Copy(c, s); c.Close() }()
		}
	}()
	e.svc.late.running.Wait()
	t.Logf("first request: %d %s; record %+v; withdrawal logs %d", r.status, r.body, e.record("k"),
		e.logs.FilterMessageSnippet("withdrawn").Len())
	time.Sleep(300 * time.Millisecond) // the breaker's probe finds Redis again
	r2 := e.post("/payments", "k", `{}`)
	if r2.status != 201 {
		t.Fatalf("first request %d; its retry once Redis answers: %d %s (handler runs so far %d, the warm-up's)", r.status, r2.status, r2.body, e.calls.Load())
	}
}
