package idempotencyfx

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redisfx/redisfx/internal/faultproxy"
	"github.com/redisfx/redisfx/internal/redistest"
)

// A's claim is held up in the network (its connection frozen) past
// StoreTimeout: A answers 500 and its withdrawal leaves marker x:A in a key
// made for it. A retry C of the same key loses its claim reply on a stalled
// Redis (DEBUG SLEEP); its claim lands, and C's withdrawal removes C's
// record but must keep marker x:A, so that A's claim, arriving later, takes
// nothing and the next retry runs. (Found by an adversary: the withdrawal
// deleted the whole key, marker included.)
func TestWithdrawal_OtherOwnersWithdrawal_KeepsTheMarker(t *testing.T) {
	srv := redistest.StartPrivate(t)
	p := faultproxy.Start(t, srv.Addr())
	e := newEnvAt(t, Config{NoWait: true, StoreTimeout: 200 * time.Millisecond, LockTimeout: 30 * time.Second},
		srv, "redis://"+p.Addr()+"")
	ctx := context.Background()
	admin := srv.Client()
	if r := e.post("/payments", "warm", `{}`); r.status != 201 {
		t.Fatalf("warm-up: %d", r.status)
	}
	// Freeze the one pooled command connection; new connections forward.
	frozen := 0
	var held []*faultproxy.Conn
	for _, c := range p.Conns() {
		if !c.Subscriber() {
			c.SetMode(faultproxy.Freeze)
			held = append(held, c)
			frozen++
		}
	}
	if frozen != 1 {
		t.Fatalf("%d command connections, want 1", frozen)
	}
	key := "k1"
	rk := e.svc.StoreKey("", key)
	if r := e.post("/payments", key, `{}`); r.status != 500 {
		t.Fatalf("A: %d %s, want 500", r.status, r.body)
	}
	e.svc.late.running.Wait()
	fields, _ := admin.HKeys(ctx, rk).Result()
	t.Logf("after A's withdrawal: fields %v, pttl %v", fields, admin.PTTL(ctx, rk).Val())
	slices.Sort(fields)
	if len(fields) != 2 || fields[0] != "m" || !strings.HasPrefix(fields[1], "x:") {
		t.Fatalf("want A's marker alone (and m), got %v", fields)
	}
	// C: the retry, whose claim reply is lost on a sleeping Redis.
	slept := make(chan struct{})
	go func() { defer close(slept); _ = admin.Do(ctx, "DEBUG", "SLEEP", "0.6").Err() }()
	time.Sleep(50 * time.Millisecond)
	if r := e.post("/payments", key, `{}`); r.status != 500 {
		t.Fatalf("C: %d %s, want 500", r.status, r.body)
	}
	<-slept
	e.svc.late.running.Wait()
	if e.logs.FilterMessageSnippet("it was withdrawn").Len() == 0 {
		t.Fatal("C's claim did not land before its withdrawal: proves nothing")
	}
	t.Logf("after C's withdrawal: exists %d", admin.Exists(ctx, rk).Val())
	// A's claim arrives now, seconds before its marker would have expired.
	for _, c := range held {
		c.SetMode(faultproxy.Forward)
	}
	time.Sleep(300 * time.Millisecond)
	all, _ := admin.HGetAll(ctx, rk).Result()
	t.Logf("after A's late claim: %v pttl %v", all, admin.PTTL(ctx, rk).Val())
	r := e.post("/payments", key, `{}`)
	if r.status != 201 {
		t.Fatalf("retry once Redis answers: %d %s (want the run: the record is held by A's withdrawn claim, which nobody runs)", r.status, r.body)
	}
}
