package main

import (
	"context"
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisfx/redisfx/internal/redistest"
	"github.com/redisfx/redisfx/streamfx"
)

// payment.created goes through the idempotency outbox: whatever dies or
// fails between the charge, the recorded outcome and the append, the
// stream ends with exactly one entry per recorded succeeded payment, the
// recorded one, with the event id of the recorded execution. The relay's
// recovery runs with the library's timings (a poll every 5 s, entries left
// pending for 10 s), so these tests wait up to 30 s for it.

// waitLog waits until p's log has a line whose msg contains msg.
func waitLog(t *testing.T, p *proc, msg string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		for _, l := range logLines(p.stderr.String()) {
			if m, _ := l["msg"].(string); strings.Contains(m, msg) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %q in the log in 20s", msg)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// kill SIGKILLs p and waits until it is gone.
func (p *proc) kill() {
	p.t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	err := <-p.exited
	p.exited <- err
}

// paymentOf is the payment of a 201's body.
func paymentOf(t *testing.T, r resp) Payment {
	t.Helper()
	var p Payment
	if r.status != 201 || json.Unmarshal([]byte(r.body), &p) != nil || p.Status != "succeeded" {
		t.Fatalf("want a succeeded payment, got %d %s", r.status, r.body)
	}
	return p
}

// createdExactlyOnce waits until the outbox has delivered what it holds
// (its index is empty and payment.created has an entry), then checks that
// payment.created holds exactly one entry: the recorded payment of key,
// with the event id of its recorded execution (record, fencing token,
// event index).
func createdExactlyOnce(t *testing.T, rdb *redis.Client, prefix, key string, recorded Payment) {
	t.Helper()
	ctx := context.Background()
	var msgs []redis.XMessage
	deadline := time.Now().Add(30 * time.Second)
	for {
		msgs = rdb.XRange(ctx, paymentCreated, "-", "+").Val()
		if len(msgs) > 0 && rdb.ZCard(ctx, prefix+":outbox").Val() == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("payment.created not delivered in 30s: %d entries, %d records pending in the outbox",
				len(msgs), rdb.ZCard(ctx, prefix+":outbox").Val())
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // a second delivery, if one were on its way
	msgs = rdb.XRange(ctx, paymentCreated, "-", "+").Val()
	if len(msgs) != 1 {
		t.Fatalf("payment.created holds %d entries for one recorded payment: %v", len(msgs), msgs)
	}
	var got Payment
	data, _ := msgs[0].Values[streamfx.FieldData].(string)
	if err := json.Unmarshal([]byte(data), &got); err != nil || got != recorded {
		t.Fatalf("payment.created announces %s, want the recorded payment %+v", data, recorded)
	}
	token := rdb.HGet(ctx, prefix+key, "n").Val()
	if want := prefix + key + "/" + token + "/0"; msgs[0].Values[streamfx.FieldEventID] != want {
		t.Fatalf("event_id %v, want %s (the recorded execution's)", msgs[0].Values[streamfx.FieldEventID], want)
	}
}

// A process killed after it charged and announced, before its outcome was
// recorded: the announcement dies with it. Redis refuses the app's scripts
// (ACL) from the moment its claim has landed, so the completion cannot land
// and the process is killed while it retries it. The client's retry,
// through another process, claims the key again once the dead owner's
// lease is over (its record in progress may have expired with it) and
// charges again (the first charge was never recorded); payment.created
// announces only that one. A publish made by the handler itself would have been appended
// before the completion failed, and announced both.
func TestPayments_KilledBetweenChargeAndCompletion_AnnouncesTheRecordedPaymentOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("kills a process")
	}
	t.Parallel()
	srv := redistest.StartPrivate(t)
	rdb := srv.Client()
	ctx := context.Background()
	if err := rdb.Do(ctx, "ACL", "SETUSER", "app", "on", ">app-secret", "~*", "&*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	prefix := redistest.Prefix(t)
	env := []string{"REDIS_URL=redis://app:app-secret@" + srv.Addr() + "/0", "IDEMPOTENCY_KEY_PREFIX=" + prefix,
		"IDEMPOTENCY_LOCK_TIMEOUT=400ms", "IDEMPOTENCY_WAIT_TIMEOUT=10s"}
	first := start(t, append(env, "PAYMENTS_DELAY=1s")...)
	go payQuiet(first, "crash-1")
	inProgress(t, srv, prefix+"crash-1") // claimed; the handler waits PAYMENTS_DELAY
	if err := rdb.Do(ctx, "ACL", "SETUSER", "app", "-eval", "-evalsha").Err(); err != nil {
		t.Fatal(err)
	}
	waitLog(t, first, "the outcome could not be recorded yet") // charged, announced, not recorded
	charged := first.executions()
	if len(charged) != 1 || charged[0].Status != "succeeded" {
		t.Fatalf("the first process's executions: %+v, want one succeeded charge", charged)
	}
	first.kill()
	if err := rdb.Do(ctx, "ACL", "SETUSER", "app", "+eval", "+evalsha").Err(); err != nil {
		t.Fatal(err)
	}
	if s := rdb.HGet(ctx, prefix+"crash-1", "s").Val(); s != "p" && s != "" {
		t.Fatalf("record state %q after the kill, want in progress (or expired with its lease)", s)
	}

	second := start(t, append(env, "PAYMENTS_DELAY=50ms")...)
	retry := second.pay("crash-1", card)
	recorded := paymentOf(t, retry)
	if retry.header.Get("Idempotent-Replayed") == "true" || recorded.ID == charged[0].ID {
		t.Fatal("the retry was replayed: the first outcome was recorded")
	}
	if again := second.pay("crash-1", card); again.body != retry.body || again.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("a second retry: %d %s, want the recorded payment replayed", again.status, again.body)
	}
	createdExactlyOnce(t, rdb, prefix, "crash-1", recorded)
}

// A process killed after its outcome and events were committed, before its
// relay delivered them: payment.created is a string key, so the append
// fails (WRONGTYPE) and the events stay pending. Once the key is fixed,
// another process's recovery delivers them, once; the client's retry is
// replayed and runs nothing.
func TestPayments_KilledBeforeTheRelayDelivered_AnotherProcessDeliversOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("kills a process")
	}
	t.Parallel()
	srv := redistest.StartPrivate(t)
	rdb := srv.Client()
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	env := []string{"REDIS_URL=" + srv.URL(), "IDEMPOTENCY_KEY_PREFIX=" + prefix}
	first := start(t, env...)
	breakStream(t, rdb)
	created := first.pay("crash-2", card)
	recorded := paymentOf(t, created)
	waitLog(t, first, "outbox events not delivered yet") // the relay tried, and failed
	first.kill()
	if s := rdb.HGet(ctx, prefix+"crash-2", "s").Val(); s != "c" {
		t.Fatalf("record state %q, want completed", s)
	}
	if rdb.ZScore(ctx, prefix+":outbox", prefix+"crash-2").Err() != nil {
		t.Fatal("the record is not pending in the outbox index")
	}
	rdb.Del(ctx, paymentCreated)

	second := start(t, env...)
	if r := second.pay("crash-2", card); r.body != created.body || r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("the retry: %d %s, want the recorded payment replayed", r.status, r.body)
	}
	createdExactlyOnce(t, rdb, prefix, "crash-2", recorded)
	if n := len(second.executions()); n != 0 {
		t.Fatalf("the second process executed %d payments, want none (replayed)", n)
	}
}

// The stream fails during the request (payment.created is a string key):
// the payment is answered 201 and replayed, its announcement waits in the
// outbox, and once the stream is fixed it arrives exactly once, within the
// recovery's time. A payment without a key has no record to commit it
// with: its publish fails and is logged, and it is not announced later.
func TestPayments_StreamFailsDuringTheRequest_AnnouncedOnceWhenFixed(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for the outbox's recovery")
	}
	t.Parallel()
	srv := redistest.StartPrivate(t)
	rdb := srv.Client()
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	p := start(t, "REDIS_URL="+srv.URL(), "IDEMPOTENCY_KEY_PREFIX="+prefix)
	breakStream(t, rdb)
	created := p.pay("broken", card)
	recorded := paymentOf(t, created)
	if r := p.pay("broken", card); r.body != created.body || r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay: %d %s", r.status, r.body)
	}
	paymentOf(t, p.pay("", card))
	waitLog(t, p, "payment.created not published") // the payment without a key
	if strings.Count(p.stderr.String(), "payment.created not published") != 1 {
		t.Fatal("the keyed payment's announcement was published by the handler, not the outbox")
	}
	waitLog(t, p, "outbox events not delivered yet")
	began := time.Now()
	rdb.Del(ctx, paymentCreated)
	createdExactlyOnce(t, rdb, prefix, "broken", recorded)
	t.Logf("delivered %v after the stream was fixed", time.Since(began).Round(time.Millisecond))
	if n := len(p.executions()); n != 2 {
		t.Fatalf("%d executions, want 2 (the keyed payment once, the one without a key)", n)
	}
}

// breakStream makes payment.created a string: every append to it fails
// with WRONGTYPE until it is deleted.
func breakStream(t *testing.T, rdb *redis.Client) {
	t.Helper()
	ctx := context.Background()
	if err := rdb.Del(ctx, paymentCreated).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Set(ctx, paymentCreated, "not a stream", 0).Err(); err != nil {
		t.Fatal(err)
	}
}
