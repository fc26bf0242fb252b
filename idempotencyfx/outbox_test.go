package idempotencyfx

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/zap"

	"github.com/redisfx/redisfx/internal/redistest"
	"github.com/redisfx/redisfx/storefx"
	"github.com/redisfx/redisfx/streamfx"
)

// fastOutbox polls every 20ms and takes over at once: a test's recovery.
var fastOutbox = withOutboxTimings(outboxTimings{poll: 20 * time.Millisecond, takeover: time.Nanosecond})

func withOutboxTimings(t outboxTimings) Option { return func(o *options) { o.outboxTimings = t } }

// outboxEnv is an env whose Service has streams.
func outboxEnv(t *testing.T, cfg Config, opts ...Option) *env {
	t.Helper()
	// The outbox takes only the streams' configuration: their client is not used.
	unused := redis.NewClient(&redis.Options{Addr: "127.0.0.1:0", ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = unused.Close() })
	return newEnvAt(t, cfg, nil, "", append(opts, withStreamsOf(t, unused))...)
}

// streamEntries waits until stream holds want entries (or the deadline
// passes) and returns them.
func streamEntries(t *testing.T, rdb redis.UniversalClient, stream string, want int) []redis.XMessage {
	t.Helper()
	var msgs []redis.XMessage
	waitFor(t, func() bool {
		msgs, _ = rdb.XRange(context.Background(), stream, "-", "+").Result()
		return len(msgs) >= want
	})
	return msgs
}

func TestOutbox_EventsReachTheirStreamsOnce_InOrder_WithIDs(t *testing.T) {
	e := outboxEnv(t, Config{})
	a, b := e.svc.cfg.KeyPrefix+"events.a", e.svc.cfg.KeyPrefix+"events.b"
	e.setHandler(func(w http.ResponseWriter, r *http.Request) {
		for i, s := range []string{a, b, a} {
			if err := Emit(r.Context(), s, []byte("ev"+strconv.Itoa(i))); err != nil {
				t.Error(err)
			}
		}
		w.WriteHeader(http.StatusCreated)
	})
	wantStatus(t, e.post("/payments", "k1", `{}`), http.StatusCreated, "")
	if !e.svc.outbox.cluster { // the streams are on the record's node: appended with the outcome
		if n := e.rdb.XLen(context.Background(), a).Val(); n != 2 {
			t.Errorf("%d entries when the response came; want 2, appended with the outcome", n)
		}
	}
	wantStatus(t, e.post("/payments", "k1", `{}`), http.StatusCreated, "") // a replay emits nothing
	gotA, gotB := streamEntries(t, e.rdb, a, 2), streamEntries(t, e.rdb, b, 1)
	rec := e.record("k1")
	id := e.svc.StoreKey("", "k1") + "/" + strconv.FormatInt(rec.FencingToken, 10)
	check := func(m redis.XMessage, data, eventID string) {
		t.Helper()
		if m.Values[streamfx.FieldData] != data || m.Values[streamfx.FieldEventID] != eventID {
			t.Errorf("entry %v; want data %q, event_id %q", m.Values, data, eventID)
		}
	}
	if len(gotA) != 2 || len(gotB) != 1 {
		t.Fatalf("a: %d entries, b: %d; want 2 and 1", len(gotA), len(gotB))
	}
	check(gotA[0], "ev0", id+"/0")
	check(gotA[1], "ev2", id+"/2")
	check(gotB[0], "ev1", id+"/1")
	// Delivered: the record keeps no events, the index no entry.
	waitFor(t, func() bool {
		n, _ := e.rdb.ZCard(context.Background(), e.svc.outbox.index(e.svc.StoreKey("", "k1"))).Result()
		return n == 0
	})
	if ev, _ := e.rdb.HExists(context.Background(), e.svc.StoreKey("", "k1"), "e").Result(); ev {
		t.Error("the record still holds its events after delivery")
	}
}

// A recorded stream.publish span names the message its event became (the
// completion replies the ids only then), and the message carries the span.
func TestOutbox_RecordedPublishSpansNameTheirMessages(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	e := outboxEnv(t, Config{}, WithTracerProvider(tp))
	a, b := e.svc.cfg.KeyPrefix+"events.a", e.svc.cfg.KeyPrefix+"events.b"
	e.setHandler(func(w http.ResponseWriter, r *http.Request) {
		for _, s := range []string{a, b, a} {
			if err := Emit(r.Context(), s, []byte("ev")); err != nil {
				t.Error(err)
			}
		}
		w.WriteHeader(http.StatusCreated)
	})
	wantStatus(t, e.post("/payments", "k1", `{}`), http.StatusCreated, "")
	published := map[string]tracetest.SpanStub{} // by span id
	waitFor(t, func() bool {
		for _, s := range exp.GetSpans() {
			if s.Name == "stream.publish" {
				published[s.SpanContext.SpanID().String()] = s
			}
		}
		return len(published) == 3
	})
	for _, stream := range []string{a, b} {
		for _, m := range streamEntries(t, e.rdb, stream, 1) {
			tp, _ := m.Values["traceparent"].(string)
			span, ok := published[strings.Split(tp+"---", "-")[2]]
			attrs := map[string]string{}
			for _, kv := range span.Attributes {
				attrs[string(kv.Key)] = kv.Value.AsString()
			}
			if !ok || attrs[streamfx.AttrMessageID] != m.ID || attrs[streamfx.AttrStream] != stream {
				t.Errorf("message %s of %s (traceparent %q): its stream.publish span has %v", m.ID, stream, tp, attrs)
			}
		}
	}
}

// Every stream an execution's events go to gets the streams' retention.
func TestOutbox_StreamsGetTheirRetention(t *testing.T) {
	unused := redis.NewClient(&redis.Options{Addr: "127.0.0.1:0", ContextTimeoutEnabled: true}) // as outboxEnv's
	t.Cleanup(func() { _ = unused.Close() })
	e := newEnvAt(t, Config{}, nil, "", withStreamsOf(t, unused, streamfx.Config{Retention: time.Hour}))
	a, b := e.svc.cfg.KeyPrefix+"events.a", e.svc.cfg.KeyPrefix+"events.b"
	e.setHandler(func(w http.ResponseWriter, r *http.Request) {
		for _, s := range []string{a, b, a} {
			if err := Emit(r.Context(), s, []byte("ev")); err != nil {
				t.Error(err)
			}
		}
		w.WriteHeader(http.StatusCreated)
	})
	wantStatus(t, e.post("/payments", "k1", `{}`), http.StatusCreated, "")
	streamEntries(t, e.rdb, a, 2)
	streamEntries(t, e.rdb, b, 1)
	for _, s := range []string{a, b} {
		if ttl := e.rdb.PTTL(context.Background(), s).Val(); ttl <= 0 || ttl > time.Hour {
			t.Errorf("stream %s expires in %v; want the retention, an hour", s, ttl)
		}
	}
}

func TestOutbox_FailedWorkCommitsNoEvents(t *testing.T) {
	e := outboxEnv(t, Config{}, fastOutbox)
	stream := e.svc.cfg.KeyPrefix + "events"
	e.setHandler(func(w http.ResponseWriter, r *http.Request) {
		_ = Emit(r.Context(), stream, []byte("for nothing"))
		w.WriteHeader(http.StatusInternalServerError)
	})
	wantStatus(t, e.post("/payments", "k1", `{}`), http.StatusInternalServerError, "")
	if err := Emit(context.Background(), stream, nil); !errors.Is(err, ErrNoOutbox) {
		t.Fatalf("Emit outside work: %v; want ErrNoOutbox", err)
	}
	if n, _ := e.rdb.Exists(context.Background(), e.svc.outbox.index(e.svc.StoreKey("", "k1"))).Result(); n != 0 {
		t.Error("a failed outcome put its record in the outbox index")
	}
	if n, _ := e.rdb.XLen(context.Background(), stream).Result(); n != 0 {
		t.Errorf("%d events of a failed execution delivered", n)
	}
}

// A taken-over owner's completion is refused, and its events with it.
func TestOutbox_StaleOwnerCommitsNoEvents(t *testing.T) {
	e := outboxEnv(t, Config{LockTimeout: time.Second}, fastOutbox)
	ctx := context.Background()
	key := e.svc.StoreKey("", "k1")
	c, _, err := e.svc.store.claim(ctx, key, "fp", "stale", time.Second, false)
	if err != nil || c.kind != claimNew {
		t.Fatal(c, err)
	}
	stale := e.svc.newLease(key, "stale", c.token)
	stale.events = []outboxEvent{{stream: e.svc.cfg.KeyPrefix + "events", data: "x"}}
	stale.stop()
	e.rdb.HSet(ctx, key, "o", "someone else") // taken over
	if done, err := stale.try(ctx, StateCompleted, mustEncode(200, nil, nil), time.Hour); err != nil || done != completionRefused {
		t.Fatalf("stale completion = %v, %v; want refused", done, err)
	}
	if ev, _ := e.rdb.HExists(ctx, key, "e").Result(); ev {
		t.Error("a refused completion committed its events")
	}
}

// Events committed for the relay by a process that died before relaying them are
// delivered by another's recovery, once; a second recovery of the same
// record appends nothing.
func TestOutbox_RecoveryDeliversWhatADeadProcessCommitted_Once(t *testing.T) {
	e := outboxEnv(t, Config{})
	dead := e.svc.outbox
	dead.shutdown(context.Background()) // it commits, but relays nothing
	stream := e.svc.cfg.KeyPrefix + "events"
	e.setHandler(func(w http.ResponseWriter, r *http.Request) {
		_ = Emit(r.Context(), stream, []byte("paid"))
		w.WriteHeader(http.StatusCreated)
	})
	// A key of another type under the stream's name: the completion
	// cannot append, so the events go to the outbox for the relay.
	e.rdb.Set(context.Background(), stream, "not a stream", time.Minute)
	wantStatus(t, e.post("/payments", "k1", `{}`), http.StatusCreated, "")
	e.rdb.Del(context.Background(), stream)
	// Another process: its recovery takes the entry over.
	other, err := New(e.rdb, e.svc.cfg.Config, WithLogger(zap.NewNop()), fastOutbox, withStreamsOf(t, e.rdb))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Close() })
	_ = other.Start(context.Background())
	got := streamEntries(t, e.rdb, stream, 1)
	waitFor(t, func() bool {
		n, _ := e.rdb.ZCard(context.Background(), other.outbox.index(e.svc.StoreKey("", "k1"))).Result()
		return n == 0
	})
	// Delivered again (the relay lost its ack): the marker lets nothing in.
	c := committed{record: e.svc.StoreKey("", "k1"), token: e.record("k1").FencingToken, events: []outboxEvent{{stream: stream, data: "paid"}}}
	other.outbox.relay([]committed{c})
	after, _ := e.rdb.XRange(context.Background(), stream, "-", "+").Result()
	if len(got) != 1 || len(after) != 1 {
		t.Fatalf("entries: %d, then %d after a second delivery; want 1 and 1", len(got), len(after))
	}
}

func withStreamsOf(t *testing.T, rdb redis.UniversalClient, cfg ...streamfx.Config) Option {
	streams, err := streamfx.New(rdb, append(cfg, streamfx.Config{})[0])
	if err != nil {
		t.Fatal(err)
	}
	return WithStreams(streams)
}

// With ReplicaAcks, a record lets its events go only once their append has
// reached a replica: without one, they stay pending (appended on the
// master, kept in the record); once a replica is back, the recovery ends
// the entry without appending them again.
func TestOutbox_ReplicaAcks_EventsKeptUntilTheirAppendIsReplicated(t *testing.T) {
	t.Parallel()
	primary := redistest.StartPrivate(t)
	ctx := context.Background()
	client, err := storefx.New("default", storefx.Config{URL: primary.URL()})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	cfg := Config{DefaultTTL: time.Minute, StoreTimeout: 5 * time.Second, ReplicaAcks: 1, ReplicaAckTimeout: 200 * time.Millisecond}
	svc, err := New(client, cfg, fastOutbox, withStreamsOf(t, client))
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	_ = svc.Start(ctx)
	stream := "events"
	client.Set(ctx, stream, "not a stream", time.Minute) // the completion cannot append: the relay will
	if _, _, err := svc.Do(ctx, "k1", "fp", func(ctx context.Context) ([]byte, error) {
		return nil, Emit(ctx, stream, []byte("paid"))
	}); err != nil {
		t.Fatal(err)
	}
	client.Del(ctx, stream)
	index, record := svc.outbox.index(svc.StoreKey("", "k1")), svc.StoreKey("", "k1")
	// No replica: appended (once, the marker holds), but not let go.
	waitFor(t, func() bool { return client.XLen(ctx, stream).Val() == 1 })
	for range 3 {
		svc.outbox.recoverPending()
	}
	if client.ZCard(ctx, index).Val() != 1 || !client.HExists(ctx, record, "e").Val() {
		t.Fatal("the record let its events go while no replica had their append")
	}
	host, port, _ := strings.Cut(primary.Addr(), ":")
	replica := redistest.StartPrivate(t, redistest.WithArgs("--replicaof", host, port))
	waitFor(t, func() bool { return client.ZCard(ctx, index).Val() == 0 })
	if n := client.XLen(ctx, stream).Val(); n != 1 || replica.Client().XLen(ctx, stream).Val() != 1 {
		t.Fatalf("%d entries on the master, %d on the replica; want 1 and 1", n, replica.Client().XLen(ctx, stream).Val())
	}
}

// Entries that keep failing (their stream's name holds a string) hold up
// no others in the recovery, however many come first.
func TestOutbox_RecoveryIsNotHeldUpByEntriesThatKeepFailing(t *testing.T) {
	e := outboxEnv(t, Config{})
	e.svc.outbox.shutdown(context.Background()) // it commits, but relays nothing
	ctx := context.Background()
	broken, healthy := e.svc.cfg.KeyPrefix+"broken", e.svc.cfg.KeyPrefix+"healthy"
	e.rdb.Set(ctx, broken, "not a stream", time.Minute)
	emit := func(key, stream string) {
		if _, _, err := e.svc.Do(ctx, key, "fp", func(ctx context.Context) ([]byte, error) {
			return nil, Emit(ctx, stream, []byte(key))
		}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range outboxScan + 1 {
		emit("b"+strconv.Itoa(i), broken)
	}
	emit("last", healthy)
	other, err := New(e.rdb, e.svc.cfg.Config, WithLogger(zap.NewNop()), fastOutbox, withStreamsOf(t, e.rdb))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Close() })
	_ = other.Start(ctx)
	if got := streamEntries(t, e.rdb, healthy, 1); len(got) != 1 {
		t.Fatalf("%d entries in the healthy stream; want 1", len(got))
	}
	// The failed deliveries left no marker: still pending, and delivered
	// once each when the stream's name is free again.
	if n := pendingEntries(t, e.rdb, e.svc.outbox); n != outboxScan+1 {
		t.Fatalf("%d entries pending; want the %d whose stream is broken", n, outboxScan+1)
	}
	e.rdb.Del(ctx, broken)
	waitFor(t, func() bool { return pendingEntries(t, e.rdb, e.svc.outbox) == 0 })
	got := map[string]int{}
	for _, m := range streamEntries(t, e.rdb, broken, outboxScan+1) {
		data, _ := m.Values[streamfx.FieldData].(string)
		got[data]++
	}
	for i := range outboxScan + 1 {
		if n := got["b"+strconv.Itoa(i)]; n != 1 {
			t.Errorf("event of b%d delivered %d times; want 1", i, n)
		}
	}
}

// pendingEntries counts the entries of every outbox index.
func pendingEntries(t *testing.T, rdb redis.UniversalClient, o *outbox) int64 {
	t.Helper()
	var cards []*redis.IntCmd
	if _, err := rdb.Pipelined(context.Background(), func(p redis.Pipeliner) error {
		for _, index := range o.indexes() {
			cards = append(cards, p.ZCard(context.Background(), index))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, c := range cards {
		n += c.Val()
	}
	return n
}

// A completion retried after its reply was lost finds the outcome recorded
// and cannot tell whether the first try appended the events: it hands
// nothing to the relay (if the first try kept them for it, they are in the
// index for the recovery), so nothing is appended twice.
func TestOutbox_RetriedCompletion_AppendsNothingTwice(t *testing.T) {
	e := outboxEnv(t, Config{})
	e.svc.outbox.shutdown(context.Background()) // what is handed to the relay stays in its queue
	ctx := context.Background()
	key := e.svc.StoreKey("", "k1")
	stream := e.svc.cfg.KeyPrefix + "events"
	c, _, err := e.svc.store.claim(ctx, key, "fp", "owner", time.Minute, false)
	if err != nil || c.kind != claimNew {
		t.Fatal(c, err)
	}
	l := e.svc.newLease(key, "owner", c.token)
	l.events = []outboxEvent{{stream: stream, data: "paid"}}
	l.stop()
	try := func() {
		t.Helper()
		if done, err := l.try(ctx, StateCompleted, mustEncode(200, nil, nil), time.Hour); err != nil || done == completionRefused {
			t.Fatal(done, err)
		}
	}
	try()
	queued := len(e.svc.outbox.queue) // 1 where the streams are in another slot, else 0 (appended)
	l.queued = false                  // as for a first try whose reply was lost
	try()
	if n := len(e.svc.outbox.queue); n != queued {
		t.Fatalf("the retry handed the events to the relay (%d queued, %d before): they would be appended twice", n, queued)
	}
	if !e.svc.outbox.cluster && e.rdb.XLen(ctx, stream).Val() != 1 {
		t.Fatalf("%d entries; want 1, appended by the first try", e.rdb.XLen(ctx, stream).Val())
	}
}
