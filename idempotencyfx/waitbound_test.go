package idempotencyfx

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/redisfx/redisfx/internal/faultproxy"
	"github.com/redisfx/redisfx/internal/redistest"
)

// waitMargin is what a wait may take beyond WaitTimeout in these tests:
// one claim in flight at the deadline (at most StoreTimeout) and the
// scheduling of a loaded 2-core machine.
const waitMargin = time.Second

// holdFirst starts a first request on key whose handler holds until the
// returned gate opens, and waits until it runs.
func holdFirst(t *testing.T, e *env, key string) (*gate, <-chan reply) {
	t.Helper()
	g := newGate(t)
	e.setHandler(func(w http.ResponseWriter, r *http.Request) {
		g.hold()
		w.WriteHeader(201)
		_, _ = w.Write([]byte("done " + r.Header.Get("Idempotency-Key")))
	})
	first := make(chan reply, 1)
	go func() { first <- e.post("/payments", key, `{}`) }()
	g.waitEntered(t)
	return g, first
}

// timedPost posts with a client that gives up after 10s, and reports how
// long the answer took.
func timedPost(e *env, key string) (reply, time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	began := time.Now()
	r := e.postCtx(ctx, "/payments", key, `{}`)
	return r, time.Since(began)
}

// Issue 14, item 2a: Redis 7's acl-pubsub-default resetchannels leaves an
// ACL user made with "~* +@all" without channel access. The waiter must
// still answer within WaitTimeout (it hung on the SUBSCRIBE confirmation),
// fall back to polling, and the owner's completion must be recorded as
// completed (the completion script failed on PUBLISH after its write, and
// the retry counted a stale_owner).
func TestWait_NoChannelPermission_BoundedPollsAndOwnerCompletes(t *testing.T) {
	t.Parallel()
	srv := redistest.StartPrivate(t)
	ctx := context.Background()
	if err := srv.Client().Do(ctx, "ACL", "SETUSER", "u", "on", ">pw", "~*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	cfg := Config{WaitTimeout: time.Second, StoreTimeout: 500 * time.Millisecond, PollInterval: 50 * time.Millisecond}
	e := newEnvAt(t, cfg, srv, "redis://u:pw@"+srv.Addr(), WithRegisterer(reg))

	g, first := holdFirst(t, e, "k")
	r, took := timedPost(e, "k")
	wantStatus(t, r, 409, CodeInProgress)
	if took > cfg.WaitTimeout+waitMargin {
		t.Fatalf("a waiter without channel permission answered after %v (WaitTimeout %v)", took, cfg.WaitTimeout)
	}

	// A waiter learns of the completion by polling.
	second := make(chan reply, 1)
	go func() { r, _ := timedPost(e, "k"); second <- r }()
	waitFor(t, func() bool { return e.recordHasWaiter("k") })
	g.open()
	if r := <-first; r.status != 201 {
		t.Fatalf("first: %d %s", r.status, r.body)
	}
	if r := <-second; r.status != 201 || r.header.Get(ReplayedHeader) != "true" {
		t.Fatalf("waiter: %d %s, want the replay", r.status, r.body)
	}
	if rec := e.record("k"); rec == nil || rec.State != StateCompleted {
		t.Fatalf("record = %+v, want completed", rec)
	}
	for _, oc := range []Outcome{OutcomeStaleOwner, OutcomeStoreError} {
		if n := counterValue(t, reg, "idempotency_requests_total", "outcome", string(oc)); n != 0 {
			t.Fatalf("a correct completion was counted as %v %s", n, oc)
		}
	}
	if n := counterValue(t, reg, "idempotency_notification_failures_total", "reason", "publish_failed"); n < 1 {
		t.Fatalf("the failed PUBLISH was not counted (publish_failed = %v)", n)
	}
	if n := counterValue(t, reg, "idempotency_notification_failures_total", "reason", "subscribe_denied"); n < 1 {
		t.Fatalf("the denied SUBSCRIBE was not counted (subscribe_denied = %v)", n)
	}
}

// The owner's side alone: a completion whose PUBLISH is refused (no
// channel permission) is recorded and counted as completed, never as a
// stale_owner or a store error.
func TestComplete_PublishRefused_RecordedAsCompleted(t *testing.T) {
	t.Parallel()
	srv := redistest.StartPrivate(t)
	ctx := context.Background()
	admin := srv.Client()
	if err := admin.Do(ctx, "ACL", "SETUSER", "u", "on", ">pw", "~*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	e := newEnvAt(t, Config{}, srv, "redis://u:pw@"+srv.Addr(), WithRegisterer(reg))
	g, first := holdFirst(t, e, "k")
	admin.HSet(ctx, e.svc.StoreKey("", "k"), "w", 1) // a waiter's mark: completion publishes
	g.open()
	if r := <-first; r.status != 201 {
		t.Fatalf("first: %d %s", r.status, r.body)
	}
	if rec := e.record("k"); rec == nil || rec.State != StateCompleted {
		t.Fatalf("record = %+v, want completed", rec)
	}
	if n := counterValue(t, reg, "idempotency_requests_total", "outcome", string(OutcomeStaleOwner)); n != 0 {
		t.Fatalf("a correct completion whose PUBLISH was refused was counted as %v stale_owner", n)
	}
	if n := counterValue(t, reg, "idempotency_requests_total", "outcome", string(OutcomeStoreError)); n != 0 {
		t.Fatalf("a correct completion whose PUBLISH was refused was counted as %v store_error", n)
	}
	if r := e.post("/payments", "k", `{}`); r.header.Get(ReplayedHeader) != "true" {
		t.Fatalf("retry: %d %s, want the replay", r.status, r.body)
	}
}

// Issue 14, item 2b: a pub/sub connection that goes silent (a NAT or load
// balancer dropped it without a reset). Waits stay bounded by WaitTimeout,
// and the connection is noticed and replaced, after which waiters are woken
// by notification again (the poll interval is an hour, so nothing else could
// wake them in time).
func TestWait_SilentPubSubConnection_BoundedThenReplaced(t *testing.T) {
	t.Parallel()
	srv := redistest.StartPrivate(t)
	proxy := faultproxy.Start(t, srv.Addr())
	reg := prometheus.NewRegistry()
	cfg := Config{WaitTimeout: time.Second, StoreTimeout: 300 * time.Millisecond, PollInterval: time.Hour}
	e := newEnvAt(t, cfg, srv, "redis://"+proxy.Addr(), WithRegisterer(reg))

	wokenByNotification(t, e, "warm") // the subscription connection now exists
	silenced := map[*faultproxy.Conn]bool{}
	for _, c := range proxy.Subscribers() {
		c.SetMode(faultproxy.Blackhole)
		silenced[c] = true
	}
	if len(silenced) == 0 {
		t.Fatal("no subscription connection went through the proxy")
	}

	g, first := holdFirst(t, e, "k2")
	r, took := timedPost(e, "k2")
	wantStatus(t, r, 409, CodeInProgress)
	if took > cfg.WaitTimeout+waitMargin {
		t.Fatalf("a waiter on a silent subscription answered after %v (WaitTimeout %v)", took, cfg.WaitTimeout)
	}
	g.open()
	<-first

	// Noticed and given up: counted as it is replaced. The replacement
	// subscribes only when someone waits (the waiter of k2 may have given
	// up before it opened; on a loaded machine it did, and a wait here for
	// a new subscriber connection timed out), so the next waiter proves it:
	// woken by notification, with polls an hour apart.
	waitFor(t, func() bool {
		return counterValue(t, reg, "idempotency_notification_failures_total", "reason", "connection_replaced") >= 1
	})
	wokenByNotification(t, e, "k3")
	for _, c := range proxy.Subscribers() {
		if silenced[c] {
			continue
		}
		return // k3's subscription went through a new connection
	}
	t.Fatal("the waiter of k3 was woken, but no new connection subscribed")
}

// wokenByNotification checks that a waiter of key is answered with the
// replay once the first request completes, within WaitTimeout.
func wokenByNotification(t *testing.T, e *env, key string) {
	t.Helper()
	g, first := holdFirst(t, e, key)
	waiter := make(chan reply, 1)
	go func() { r, _ := timedPost(e, key); waiter <- r }()
	waitFor(t, func() bool { return e.recordHasWaiter(key) && e.svc.notify.confirmedCount() == 1 })
	g.open()
	if r := <-first; r.status != 201 {
		t.Fatalf("first of %s: %d %s", key, r.status, r.body)
	}
	if r := <-waiter; r.status != 201 || r.header.Get(ReplayedHeader) != "true" {
		t.Fatalf("waiter of %s: %d %s, want the replay", key, r.status, r.body)
	}
}

// counterValue reads one series of a counter from reg (0 when absent).
func counterValue(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// A waiter is woken only by the outcome of its own request: if the record
// it waits on is deleted (an operator's DEL, or Redis losing it) and taken
// by a request with another body, that request's completion message must
// not be replayed to the waiter. It gets 422, as a new request would.
func TestWait_MessageOfAnotherFingerprint_NotReplayed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{WaitTimeout: 5 * time.Second, PollInterval: time.Hour}, nil)
	gates := map[string]*gate{`{"a":1}`: newGate(t), `{"b":2}`: newGate(t)}
	e.setHandler(func(w http.ResponseWriter, r *http.Request) {
		body := make([]byte, 16)
		n, _ := r.Body.Read(body)
		gates[string(body[:n])].hold()
		w.WriteHeader(201)
		_, _ = w.Write([]byte("charged " + string(body[:n])))
	})
	post := func(body string) <-chan reply {
		ch := make(chan reply, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			ch <- e.postCtx(ctx, "/payments", "k", body)
		}()
		return ch
	}
	// Waiter A must be parked before the record is deleted: once its
	// subscription is confirmed it polls once, and a poll after the Delete
	// would (rightly) make it the new owner. With PollInterval an hour it
	// polls again only when a message is not its own.
	var polls atomic.Int32
	e.svc.onWaitPoll = func() { polls.Add(1) }
	firstA := post(`{"a":1}`)
	gates[`{"a":1}`].waitEntered(t)
	waiterA := post(`{"a":1}`)
	waitFor(t, func() bool { return e.recordHasWaiter("k") && e.svc.notify.confirmedCount() == 1 && polls.Load() >= 1 })
	if _, err := e.svc.Delete(context.Background(), "", "k"); err != nil {
		t.Fatal(err)
	}
	firstB := post(`{"b":2}`)
	gates[`{"b":2}`].waitEntered(t)
	waiterB := post(`{"b":2}`)
	waitFor(t, func() bool { return e.recordHasWaiter("k") })
	gates[`{"b":2}`].open()
	if r := <-firstB; r.status != 201 {
		t.Fatalf("first B: %d %s", r.status, r.body)
	}
	if r := <-waiterB; r.body != `charged {"b":2}` {
		t.Fatalf("waiter B: %d %s, want B's replay", r.status, r.body)
	}
	r := <-waiterA
	if r.body == `charged {"b":2}` {
		t.Fatal("waiter A received the response of another request body")
	}
	wantStatus(t, r, 422, CodeKeyReused)
	gates[`{"a":1}`].open()
	<-firstA
}

// Pub/sub channels are shared by every database of a server. Two apps on
// one Redis, each in its own database, with the same KeyPrefix and the same
// idempotency key: app A's completion message reaches app B's waiter on the
// same channel. B's waiter must not replay A's answer, which B's handler
// never produced: it takes only the outcome of the owner its own claim saw
// running, asks its own record otherwise, and replays B's answer.
// (Found by an adversary: B's duplicate got "answer of app A".)
func TestWait_MessageFromAnotherDatabase_NotReplayed(t *testing.T) {
	t.Parallel()
	srv := redistest.StartPrivate(t)
	cfg := Config{KeyPrefix: redistest.Prefix(t), WaitTimeout: 10 * time.Second, PollInterval: time.Hour}
	a := newEnvAt(t, cfg, srv, srv.URL()+"/2")
	b := newEnvAt(t, cfg, srv, srv.URL()+"/3")
	gateA, gateB := newGate(t), newGate(t)
	for _, app := range []struct {
		e    *env
		g    *gate
		name string
	}{{a, gateA, "A"}, {b, gateB, "B"}} {
		app.e.setHandler(func(w http.ResponseWriter, r *http.Request) {
			app.e.calls.Add(1)
			app.g.hold()
			w.WriteHeader(201)
			_, _ = w.Write([]byte("answer of app " + app.name))
		})
	}
	post := func(e *env) <-chan reply {
		ch := make(chan reply, 1)
		go func() { ch <- e.post("/payments", "order-1", `{"amount":10}`) }()
		return ch
	}
	var pollsB atomic.Int32
	b.svc.onWaitPoll = func() { pollsB.Add(1) }
	firstA, firstB := post(a), post(b)
	gateA.waitEntered(t)
	gateB.waitEntered(t)
	waiterA := post(a) // so that A's completion publishes
	waiterB := post(b)
	// B's waiter parked: subscribed, and its confirmation poll done.
	waitFor(t, func() bool {
		return a.recordHasWaiter("order-1") && b.recordHasWaiter("order-1") &&
			b.svc.notify.confirmedCount() == 1 && pollsB.Load() >= 1
	})
	gateA.open()
	if r := <-firstA; r.status != 201 || r.body != "answer of app A" {
		t.Fatalf("first A: %d %q", r.status, r.body)
	}
	if r := <-waiterA; r.body != "answer of app A" {
		t.Fatalf("waiter A: %d %q, want A's replay", r.status, r.body)
	}
	// A's message reached B's waiter: it must ask its own record (a second
	// poll, which finds B's request still running) and go on waiting.
	select {
	case r := <-waiterB:
		t.Fatalf("waiter B answered %d %q while B's request still runs", r.status, r.body)
	case <-waitUntil(t, func() bool { return pollsB.Load() >= 2 }):
	case <-time.After(10 * time.Second):
		t.Fatal("waiter B neither answered nor asked its record in 10s")
	}
	gateB.open()
	if r := <-firstB; r.status != 201 || r.body != "answer of app B" {
		t.Fatalf("first B: %d %q", r.status, r.body)
	}
	r := <-waiterB
	if r.status != 201 || r.body != "answer of app B" || r.header.Get(ReplayedHeader) != "true" {
		t.Fatalf("waiter B: %d %q (replayed %q), want B's own answer replayed", r.status, r.body, r.header.Get(ReplayedHeader))
	}
	if a.calls.Load() != 1 || b.calls.Load() != 1 {
		t.Fatalf("handler runs: A %d, B %d; want 1 each", a.calls.Load(), b.calls.Load())
	}
}

// waitUntil returns a channel closed once cond holds (checked every 5ms);
// it stops checking when the test ends.
func waitUntil(t *testing.T, cond func() bool) <-chan struct{} {
	done, ctx := make(chan struct{}), t.Context()
	go func() {
		for !cond() {
			select {
			case <-ctx.Done():
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
		close(done)
	}()
	return done
}

// A completion message is taken only when it names the owner the waiter's
// claim saw running. During a rolling upgrade a message of the previous
// version (state, fingerprint, response: it names no record) is not taken
// either, even with this waiter's fingerprint: the waiter asks its own
// record. And a waiter of the previous version refuses this version's
// message (its length field is not a number), so it polls too.
func TestGrantFromMessage_OnlyTheOwnerSeenRunning(t *testing.T) {
	t.Parallel()
	s := &Service{cfg: &settings{Config: Config{LockTimeout: time.Second}}}
	blob, _ := encodeResponse(201, nil, nil, []byte("ok"))
	resp := string(blob)
	fp := strings.Repeat("f", 64)
	for _, tc := range []struct {
		name, payload, holder string
		ok                    bool
	}{
		{"own owner", "co9:owner-one" + resp, "owner-one", true},
		{"own owner, failed", "fo9:owner-one", "owner-one", true},
		{"another owner", "co9:owner-two" + resp, "owner-one", false},
		{"another owner, a prefix of ours", "co5:owner" + resp, "owner-one", false},
		{"owner not seen", "co9:owner-one" + resp, "", false},
		{"previous version, own fingerprint", "c64:" + fp + resp, "owner-one", false},
		{"previous version, owner where the fingerprint was", "c9:owner-one" + resp, "owner-one", false},
		{"first version (state and response)", "c" + resp, "owner-one", false},
		{"empty", "", "owner-one", false},
		{"unknown state", "xo9:owner-one" + resp, "owner-one", false},
	} {
		_, ok := s.claimFromMessage(tc.payload, tc.holder)
		if ok != tc.ok {
			t.Errorf("%s: taken %v, want %v", tc.name, ok, tc.ok)
		}
	}
	// The previous version's parser: state, length, ':', fingerprint.
	previous := func(payload, fp string) bool {
		n, rest, found := strings.Cut(payload[1:], ":")
		size, err := strconv.Atoi(n)
		return found && err == nil && size == len(fp) && strings.HasPrefix(rest, fp)
	}
	if previous("co9:owner-one"+resp, fp) || previous("co64:"+fp+resp, fp) {
		t.Error("a waiter of the previous version would take this version's message")
	}
}
