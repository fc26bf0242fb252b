package idempotencyfx

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisfx/redisfx/internal/redistest"
)

// Another tenant of the Redis server (another database; pub/sub channels are
// shared by all) subscribes to the channels, reads the owner token in one
// completion message, and publishes forged completions naming the tokens
// that would come next on the channel of another key being waited on. The
// waiter must not take them: owner tokens are random. (Found by an
// adversary when tokens were a prefix per Service and a counter.)
func TestWait_ForgedMessageNamingAGuessedOwner_NotReplayed(t *testing.T) {
	srv := redistest.StartPrivate(t)
	cfg := Config{KeyPrefix: "idem:", WaitTimeout: 10 * time.Second, PollInterval: time.Hour}
	victim := newEnvAt(t, cfg, srv, srv.URL()+"/2")
	g := newGate(t)
	victim.setHandler(func(w http.ResponseWriter, r *http.Request) {
		victim.calls.Add(1)
		g.hold()
		w.WriteHeader(201)
		_, _ = w.Write([]byte("genuine answer"))
	})
	ctx := context.Background()
	spy := redis.NewClient(&redis.Options{Addr: srv.Addr(), DB: 5})
	defer spy.Close()
	ps := spy.PSubscribe(ctx, "idem:*")
	defer ps.Close()
	if _, err := ps.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	// k1: a request and a waiter, so that the completion is published.
	first := make(chan reply, 1)
	go func() { first <- victim.post("/payments", "k1", `{"amount":1}`) }()
	g.waitEntered(t)
	second := make(chan reply, 1)
	go func() { second <- victim.post("/payments", "k1", `{"amount":1}`) }()
	waitFor(t, func() bool { return victim.recordHasWaiter("k1") })
	g.open()
	<-first
	<-second
	msg, err := ps.ReceiveMessage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// payload: state 'o' len ':' token response
	rest := msg.Payload[2:]
	n, rest, _ := strings.Cut(rest, ":")
	size, _ := strconv.Atoi(n)
	token := rest[:size]
	cut := strings.LastIndex(token, ":")
	prefix, seqText := token[:cut+1], token[cut+1:]
	seq, _ := strconv.ParseUint(seqText, 36, 64)
	t.Logf("spied owner token %q on channel %q", token, msg.Channel)

	// k2: a new request runs, a duplicate waits.
	g2 := newGate(t)
	victim.setHandler(func(w http.ResponseWriter, r *http.Request) {
		victim.calls.Add(1)
		g2.hold()
		w.WriteHeader(201)
		_, _ = w.Write([]byte("genuine answer 2"))
	})
	firstB := make(chan reply, 1)
	go func() { firstB <- victim.post("/payments", "k2", `{"amount":2}`) }()
	g2.waitEntered(t)
	waiter := make(chan reply, 1)
	go func() { waiter <- victim.post("/payments", "k2", `{"amount":2}`) }()
	waitFor(t, func() bool { return victim.recordHasWaiter("k2") })
	time.Sleep(200 * time.Millisecond) // subscribed
	forged, _ := encodeResponse(201, http.Header{"X-Forged": {"yes"}}, nil, []byte("FORGED ANSWER"))
	for s := seq + 1; s < seq+10; s++ {
		tok := prefix + strconv.FormatUint(s, 36)
		spy.Publish(ctx, "idem:k2", "co"+strconv.Itoa(len(tok))+":"+tok+string(forged))
		time.Sleep(50 * time.Millisecond) // one message per wake-up
	}
	select {
	case r := <-waiter:
		g2.open()
		<-firstB
		t.Fatalf("the waiter answered %d %q (X-Forged %q) while its record is still in progress (genuine: %q)", r.status, r.body, r.header.Get("X-Forged"), "genuine answer 2")
	case <-time.After(time.Second):
		g2.open()
		<-firstB
		<-waiter
	}
}
