package streamfx

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/fx"
	"go.uber.org/goleak"

	"github.com/redisfx/redisfx/internal/faultproxy"
	"github.com/redisfx/redisfx/internal/obstest"
	"github.com/redisfx/redisfx/internal/redistest"
	"github.com/redisfx/redisfx/storefx"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(redistest.ForExamples(m), goleak.IgnoreTopFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}

func client(t testing.TB, srv *redistest.Server) *storefx.Client {
	t.Helper()
	c, err := storefx.New("default", storefx.Config{URL: srv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// newStreams builds (not starts) Streams; Stop runs when t ends.
func newStreams(t testing.TB, srv *redistest.Server, cfg Config, opts ...Option) *Streams {
	t.Helper()
	s, err := New(client(t, srv), cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	return s
}

func start(t testing.TB, s *Streams) {
	t.Helper()
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// wait blocks until ch closes, failing t after limit.
func wait(t testing.TB, ch <-chan struct{}, limit time.Duration, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(limit):
		t.Fatalf("timed out waiting for %s", what)
	}
}

func pendingCount(t testing.TB, srv *redistest.Server, stream, group string) int64 {
	t.Helper()
	p, err := srv.Client().XPending(context.Background(), stream, group).Result()
	if err != nil {
		t.Fatal(err)
	}
	return p.Count
}

// 200 messages, two processes in one group: each is handled exactly once
// and acknowledged.
func TestEveryMessageProcessedExactlyOnce(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	stream := redistest.Prefix(t) + "orders"
	var mu sync.Mutex
	seen := map[string]int{}
	all := make(chan struct{})
	handler := func(_ context.Context, m Message) error {
		mu.Lock()
		defer mu.Unlock()
		seen[string(m.Data)]++
		if len(seen) == 200 {
			close(all)
		}
		return nil
	}
	var instances []*Streams
	for i := range 2 {
		s := newStreams(t, srv, Config{Consumer: fmt.Sprint("c", i), Concurrency: 4})
		if err := s.Handle(stream, handler); err != nil {
			t.Fatal(err)
		}
		start(t, s)
		instances = append(instances, s)
	}
	for i := range 200 {
		if _, err := instances[i%2].Publish(context.Background(), stream, []byte(fmt.Sprint("order-", i))); err != nil {
			t.Fatal(err)
		}
	}
	wait(t, all, 20*time.Second, "200 messages")
	for _, s := range instances {
		if err := s.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for k, n := range seen {
		if n != 1 {
			t.Errorf("%s handled %d times", k, n)
		}
	}
	if n := pendingCount(t, srv, stream, "redisfx"); n != 0 {
		t.Fatalf("%d messages left unacknowledged", n)
	}
}

func TestFailingTwiceThenSucceeding_IsRetried(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	stream := redistest.Prefix(t) + "emails"
	s := newStreams(t, srv, Config{ClaimIdle: 100 * time.Millisecond})
	var mu sync.Mutex
	var attempts []int
	done := make(chan struct{})
	_ = s.Handle(stream, func(_ context.Context, m Message) error {
		mu.Lock()
		defer mu.Unlock()
		attempts = append(attempts, m.Attempt)
		if m.Attempt < 3 {
			return errors.New("smtp timeout")
		}
		close(done)
		return nil
	})
	start(t, s)
	if _, err := s.Publish(context.Background(), stream, []byte("welcome")); err != nil {
		t.Fatal(err)
	}
	wait(t, done, 10*time.Second, "the third attempt")
	_ = s.Stop(context.Background())
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(attempts) != "[1 2 3]" {
		t.Fatalf("attempts %v", attempts)
	}
	if n := pendingCount(t, srv, stream, "redisfx"); n != 0 {
		t.Fatalf("pending %d after success", n)
	}
	if n := srv.Client().XLen(context.Background(), stream+DLQSuffix).Val(); n != 0 {
		t.Fatalf("dead-letter stream has %d entries", n)
	}
}

func TestAlwaysFailing_LandsInDLQWithReason(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	stream := redistest.Prefix(t) + "webhooks"
	s := newStreams(t, srv, Config{ClaimIdle: 100 * time.Millisecond, MaxAttempts: 3})
	var calls atomic.Int64
	_ = s.Handle(stream, func(context.Context, Message) error { calls.Add(1); return errors.New("endpoint returned 500") })
	start(t, s)
	id, err := s.Publish(context.Background(), stream, []byte("payload"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	deadline := time.Now().Add(10 * time.Second)
	var dlq []redis.XMessage
	for len(dlq) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("nothing in %s after %d calls", stream+DLQSuffix, calls.Load())
		}
		time.Sleep(20 * time.Millisecond)
		dlq = srv.Client().XRange(ctx, stream+DLQSuffix, "-", "+").Val()
	}
	_ = s.Stop(ctx)
	v := dlq[0].Values
	if v[FieldReason] != ReasonMaxRetriesExceeded || v[FieldOriginalID] != id || v[FieldAttempts] != "3" || v[FieldData] != "payload" ||
		v[FieldOriginalStream] != stream || !strings.Contains(v[FieldError].(string), "endpoint returned 500") {
		t.Fatalf("dead-letter entry %v", v)
	}
	if calls.Load() != 3 || len(dlq) != 1 {
		t.Fatalf("handler ran %d times, %d dead-letter entries", calls.Load(), len(dlq))
	}
	if n := pendingCount(t, srv, stream, "redisfx"); n != 0 {
		t.Fatalf("pending %d after dead-lettering", n)
	}
}

// A consumer that died holding a message (read, never acknowledged) loses
// it to a live one after ClaimIdle.
func TestCrashedConsumersMessageIsReclaimed(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	stream := redistest.Prefix(t) + "jobs"
	ctx := context.Background()
	raw := srv.Client()
	raw.XGroupCreateMkStream(ctx, stream, "redisfx", "0")
	id := raw.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{FieldData, "job-1"}}).Val()
	// The dead process: it read the message and was killed mid-handler.
	if got := raw.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "redisfx", Consumer: "killed", Streams: []string{stream, ">"}, Count: 1}).Val(); len(got) != 1 {
		t.Fatal("the doomed consumer read nothing")
	}
	s := newStreams(t, srv, Config{Consumer: "survivor", ClaimIdle: 150 * time.Millisecond})
	got := make(chan Message, 1)
	_ = s.Handle(stream, func(_ context.Context, m Message) error { got <- m; return nil })
	start(t, s)
	select {
	case m := <-got:
		if m.ID != id || string(m.Data) != "job-1" || m.Attempt != 2 {
			t.Fatalf("reclaimed %+v", m)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the killed consumer's message was never reclaimed")
	}
	_ = s.Stop(ctx)
	if n := pendingCount(t, srv, stream, "redisfx"); n != 0 {
		t.Fatalf("pending %d", n)
	}
}

// A handler running four times ClaimIdle keeps its message: the other
// consumer never gets it.
func TestSlowHandlerIsNotDoubled(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	stream := redistest.Prefix(t) + "slow"
	var calls atomic.Int64
	done := make(chan struct{})
	handler := func(context.Context, Message) error {
		if calls.Add(1) == 1 {
			time.Sleep(1200 * time.Millisecond) // the slow work under test
			close(done)
		}
		return nil
	}
	for i := range 2 {
		s := newStreams(t, srv, Config{Consumer: fmt.Sprint("c", i), ClaimIdle: 300 * time.Millisecond})
		_ = s.Handle(stream, handler)
		start(t, s)
		if i == 0 {
			if _, err := s.Publish(context.Background(), stream, []byte("x")); err != nil {
				t.Fatal(err)
			}
		}
	}
	wait(t, done, 10*time.Second, "the slow handler")
	time.Sleep(600 * time.Millisecond) // two more ClaimIdle periods for a wrongful claim to show
	if n := calls.Load(); n != 1 {
		t.Fatalf("handler ran %d times", n)
	}
}

func TestStop_FinishesMessageInHand_AndIsBounded(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	stream := redistest.Prefix(t) + "stop"
	s := newStreams(t, srv, Config{StopTimeout: 300 * time.Millisecond})
	inHand := make(chan struct{})
	var finished atomic.Bool
	_ = s.Handle(stream, func(ctx context.Context, m Message) error {
		close(inHand)
		time.Sleep(100 * time.Millisecond) // work that outlives the stop signal
		finished.Store(true)
		return nil
	})
	start(t, s)
	_, _ = s.Publish(context.Background(), stream, []byte("a"))
	wait(t, inHand, 10*time.Second, "the message")
	if err := s.Stop(context.Background()); err != nil || !finished.Load() {
		t.Fatalf("stop = %v, finished %v", err, finished.Load())
	}
	if n := pendingCount(t, srv, stream, "redisfx"); n != 0 {
		t.Fatalf("the message in hand was not acknowledged (%d pending)", n)
	}

	// A handler that never returns on its own: Stop cancels it after StopTimeout.
	stuck := newStreams(t, srv, Config{StopTimeout: 200 * time.Millisecond})
	held := make(chan struct{})
	_ = stuck.Handle(stream+"-stuck", func(ctx context.Context, m Message) error { close(held); <-ctx.Done(); return ctx.Err() })
	start(t, stuck)
	_, _ = stuck.Publish(context.Background(), stream+"-stuck", []byte("b"))
	wait(t, held, 10*time.Second, "the stuck message")
	began := time.Now()
	if err := stuck.Stop(context.Background()); err == nil || !strings.Contains(err.Error(), "StopTimeout") {
		t.Fatalf("stop of a stuck handler = %v", err)
	}
	if d := time.Since(began); d > 3*time.Second {
		t.Fatalf("stop took %v with StopTimeout 200ms", d)
	}
}

// The consumer's span joins the producer's trace; every span of the
// catalogue carries its attributes and events.
func TestSpans_TraceTravelsInTheMessage(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	spans := obstest.NewSpans(t)
	stream := redistest.Prefix(t) + "traced"
	s := newStreams(t, srv, Config{Consumer: "worker-1", MaxAttempts: 1}, WithTracerProvider(spans.Tracer()))
	handled := make(chan struct{}, 2)
	_ = s.Handle(stream, func(_ context.Context, m Message) error {
		defer func() { handled <- struct{}{} }()
		if string(m.Data) == "bad" {
			return errors.New("unparseable")
		}
		return nil
	})
	start(t, s)
	ctx, parent := spans.Tracer().Tracer("test").Start(context.Background(), "POST /payments")
	id, err := s.Publish(ctx, stream, []byte("good"))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = s.Publish(ctx, stream, []byte("bad"))
	parent.End()
	<-handled
	<-handled
	_ = s.Stop(context.Background())
	traceID := parent.SpanContext().TraceID().String()

	pubs := spans.Named(t, "stream.publish")
	if len(pubs) != 2 {
		t.Fatalf("publish spans %+v", pubs)
	}
	p := pubs[0]
	if p.Kind != "PRODUCER" || p.TraceID != traceID || p.Attributes[AttrStream] != stream || p.Attributes[AttrMessageID] != id ||
		p.Attributes[AttrMessageSize] != float64(4) || obstest.EventNames(p)[0] != "message.published" || p.Attributes["redisfx.plugin"] != "streams" {
		t.Errorf("stream.publish %+v", p)
	}
	var good, bad *struct{ i int }
	consumes := spans.Named(t, "stream.consume")
	for i, c := range consumes {
		if c.Attributes[AttrMessageID] == id {
			good = &struct{ i int }{i}
		} else {
			bad = &struct{ i int }{i}
		}
	}
	if good == nil || bad == nil {
		t.Fatalf("consume spans %+v", consumes)
	}
	c := consumes[good.i]
	if c.Kind != "CONSUMER" || c.TraceID != traceID || c.ParentSpanID != p.SpanID || c.Attributes[AttrGroup] != "redisfx" ||
		c.Attributes[AttrConsumer] != "worker-1" || c.Attributes[AttrStream] != stream {
		t.Errorf("consumer span does not join the producer's trace: %+v (producer span %s)", c, p.SpanID)
	}
	if ev := obstest.EventNames(c); len(ev) < 2 || ev[0] != "message.received" || ev[1] != "message.processed" {
		t.Errorf("consume events %v", ev)
	}
	b := consumes[bad.i]
	if ev := b.Events; len(ev) < 2 || ev[1].Name != "processing.failed" || ev[1].Attributes["attempt"] != float64(1) || b.Status.Code != "ERROR" {
		t.Errorf("failed consume %+v", b)
	}
	acks := spans.Named(t, "stream.ack")
	if len(acks) != 1 || acks[0].ParentSpanID != c.SpanID || obstest.EventNames(acks[0])[0] != "message.acknowledged" {
		t.Errorf("stream.ack %+v", acks)
	}
	dlqs := spans.Named(t, "stream.move_to_dlq")
	if len(dlqs) != 1 || dlqs[0].Attributes[AttrDLQStream] != stream+":dlq" || dlqs[0].Attributes[AttrReason] != "MaxRetriesExceeded" ||
		obstest.EventNames(dlqs[0])[0] != "message.moved_to_dlq" || dlqs[0].ParentSpanID != b.SpanID {
		t.Errorf("stream.move_to_dlq %+v", dlqs)
	}
	for _, sp := range spans.All(t) {
		for k := range sp.Attributes {
			if strings.HasPrefix(k, "redisfx.stream") {
				t.Errorf("%s carries prefixed attribute %s", sp.Name, k)
			}
		}
	}
}

// Found by an adversary: a message whose consumer died on its last attempt
// goes straight to the dead-letter stream when claimed, without a run; its
// stream.move_to_dlq span was the root of a new trace. It now has a
// stream.consume span in the producer's trace (message.received, then
// processing.failed saying it was never acknowledged), parent of the
// stream.move_to_dlq span, as for a run.
func TestSpans_DeadLetterOfACrashedLastAttempt_JoinsTheProducersTrace(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	spans := obstest.NewSpans(t)
	stream := redistest.Prefix(t) + "crashed"
	ctx := context.Background()
	raw := srv.Client()
	if err := raw.XGroupCreateMkStream(ctx, stream, "redisfx", "0").Err(); err != nil {
		t.Fatal(err)
	}
	pub := newStreams(t, srv, Config{}, WithTracerProvider(spans.Tracer()))
	pctx, parent := spans.Tracer().Tracer("test").Start(ctx, "POST /orders")
	if _, err := pub.Publish(pctx, stream, []byte("m")); err != nil {
		t.Fatal(err)
	}
	parent.End()
	// A consumer reads it (its first and last attempt) and dies.
	if err := raw.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "redisfx", Consumer: "dead", Streams: []string{stream, ">"}, Count: 1}).Err(); err != nil {
		t.Fatal(err)
	}
	s := newStreams(t, srv, Config{MaxAttempts: 1, ClaimIdle: 100 * time.Millisecond}, WithTracerProvider(spans.Tracer()))
	_ = s.Handle(stream, func(context.Context, Message) error { t.Error("a message on its last attempt was run"); return nil })
	start(t, s)
	deadline := time.Now().Add(10 * time.Second)
	for raw.XLen(ctx, stream+DLQSuffix).Val() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("not dead-lettered within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := s.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	traceID := parent.SpanContext().TraceID().String()
	pubs := spans.Named(t, "stream.publish")
	consumes := spans.Named(t, "stream.consume")
	dlqs := spans.Named(t, "stream.move_to_dlq")
	if len(pubs) != 1 || len(consumes) != 1 || len(dlqs) != 1 {
		t.Fatalf("%d publish, %d consume, %d move_to_dlq spans; want one each", len(pubs), len(consumes), len(dlqs))
	}
	c, d := consumes[0], dlqs[0]
	if c.TraceID != traceID || c.ParentSpanID != pubs[0].SpanID || c.Status.Code != "ERROR" {
		t.Errorf("stream.consume is not the publish span's child, failed, in the producer's trace: %+v", c)
	}
	if ev := c.Events; len(ev) < 2 || ev[0].Name != "message.received" || ev[1].Name != "processing.failed" ||
		ev[1].Attributes["attempt"] != float64(1) || ev[1].Attributes["error"] != "delivered 1 times without being acknowledged" {
		t.Errorf("stream.consume events %+v", ev)
	}
	if d.TraceID != traceID || d.ParentSpanID != c.SpanID {
		t.Errorf("stream.move_to_dlq (trace %s, parent %q) is not a child of stream.consume %s in the producer's trace %s", d.TraceID, d.ParentSpanID, c.SpanID, traceID)
	}
}

func TestMetrics_LengthLagAndDLQ(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	stream := redistest.Prefix(t) + "backlog"
	reg := prometheus.NewRegistry()
	s := newStreams(t, srv, Config{}, WithRegisterer(reg))
	ctx := context.Background()
	srv.Client().XGroupCreateMkStream(ctx, stream, "redisfx", "0")
	for range 5 {
		if _, err := s.Publish(ctx, stream, []byte("m")); err != nil {
			t.Fatal(err)
		}
	}
	srv.Client().XAdd(ctx, &redis.XAddArgs{Stream: stream + DLQSuffix, Values: []any{FieldData, "dead"}})
	// Two delivered but not acknowledged: still lag.
	srv.Client().XReadGroup(ctx, &redis.XReadGroupArgs{Group: "redisfx", Consumer: "x", Streams: []string{stream, ">"}, Count: 2})
	// A scrape serves the background reading, which Start begins with.
	read := readings(s)
	start(t, s)
	select {
	case <-read:
	case <-time.After(5 * time.Second):
		t.Fatal("no background reading 5s after Start")
	}
	for _, tc := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"stream_length", []string{"stream", stream}, 5},
		{"stream_length", []string{"stream", stream + ":dlq"}, 1},
		{"stream_consumer_lag", []string{"stream", stream, "group", "redisfx"}, 5},
	} {
		if got := obstest.Value(t, reg, tc.name, tc.labels...); got != tc.want {
			t.Errorf("%s%v = %v, want %v", tc.name, tc.labels, got, tc.want)
		}
	}
}

// The Fx module runs handlers contributed with AsHandler and stops them
// with the app.
func TestModule_AsHandler(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	stream := redistest.Prefix(t) + "fx"
	got := make(chan string, 1)
	var streams *Streams
	app := fx.New(
		fx.NopLogger,
		fx.Supply(&storefx.Config{URL: srv.URL()}),
		storefx.Module,
		Module,
		fx.Provide(AsHandler(func() StreamHandler {
			return StreamHandler{Stream: stream, Handler: func(_ context.Context, m Message) error { got <- string(m.Data); return nil }}
		})),
		fx.Populate(&streams),
	)
	if err := app.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := streams.Publish(context.Background(), stream, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-got:
		if m != "hello" {
			t.Fatalf("got %q", m)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("handler never ran")
	}
	if err := app.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestConfigNamesTheOption(t *testing.T) {
	for opt, c := range map[string]Config{
		"MaxAttempts": {MaxAttempts: -1}, "ClaimIdle": {ClaimIdle: time.Millisecond}, "StartID": {StartID: "1-0"},
		"Concurrency": {Concurrency: -2}, "MaxLen": {MaxLen: -1}, "StopTimeout": {StopTimeout: -1},
	} {
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "Config."+opt+":") {
			t.Errorf("%s: %v", opt, err)
		}
	}
}

// With Retention, no stream key is left without an expiry: not the stream
// a group creates, not the stream, not its dead-letter stream.
func TestRetention_EveryStreamKeyExpires(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	stream := redistest.Prefix(t) + "kept"
	s := newStreams(t, srv, Config{Retention: time.Hour, MaxAttempts: 1})
	dead := make(chan struct{})
	_ = s.Handle(stream, func(context.Context, Message) error { return errors.New("no") })
	start(t, s)
	ctx := context.Background()
	if ttl := srv.Client().PTTL(ctx, stream).Val(); ttl <= 0 {
		t.Fatalf("stream made by the group: PTTL %v", ttl)
	}
	if _, err := s.Publish(ctx, stream, []byte("x")); err != nil {
		t.Fatal(err)
	}
	go func() {
		for srv.Client().XLen(ctx, stream+DLQSuffix).Val() == 0 {
			time.Sleep(10 * time.Millisecond)
		}
		close(dead)
	}()
	wait(t, dead, 10*time.Second, "the dead letter")
	for _, k := range []string{stream, stream + DLQSuffix} {
		if ttl := srv.Client().PTTL(ctx, k).Val(); ttl <= 0 || ttl > time.Hour {
			t.Errorf("%s PTTL %v", k, ttl)
		}
	}
}

// A consumer leaves its group at stop unless it still holds messages.
func TestStop_LeavesTheGroupUnlessHoldingMessages(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	stream := redistest.Prefix(t) + "leave"
	ctx := context.Background()
	consumers := func() map[string]bool {
		out := map[string]bool{}
		for _, c := range srv.Client().XInfoConsumers(ctx, stream, "redisfx").Val() {
			out[c.Name] = true
		}
		return out
	}
	clean := newStreams(t, srv, Config{Consumer: "clean"})
	done := make(chan struct{})
	_ = clean.Handle(stream, func(context.Context, Message) error { close(done); return nil })
	start(t, clean)
	_, _ = clean.Publish(ctx, stream, []byte("a"))
	wait(t, done, 10*time.Second, "the message")
	_ = clean.Stop(ctx)
	if consumers()["clean"] {
		t.Fatal("a consumer with nothing pending stayed in the group")
	}
	holder := newStreams(t, srv, Config{Consumer: "holder", ClaimIdle: time.Hour})
	failed := make(chan struct{})
	_ = holder.Handle(stream, func(context.Context, Message) error { close(failed); return errors.New("later") })
	start(t, holder)
	_, _ = holder.Publish(ctx, stream, []byte("b"))
	wait(t, failed, 10*time.Second, "the failure")
	_ = holder.Stop(ctx)
	if !consumers()["holder"] || pendingCount(t, srv, stream, "redisfx") != 1 {
		t.Fatal("a consumer holding a pending message left the group: the message would be lost")
	}
}

// An invalid Config fails fx.New with the field's name.
func TestModule_InvalidConfigFailsStartNamingTheField(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	app := fx.New(fx.NopLogger,
		fx.Supply(&storefx.Config{URL: srv.URL()}, &Config{MaxAttempts: -1}),
		storefx.Module, Module, fx.Invoke(func(*Streams) {}))
	if err := app.Err(); err == nil || !strings.Contains(err.Error(), "Config.MaxAttempts") {
		t.Fatalf("fx.New = %v", err)
	}
}

// Found by an adversary: with Block (5s) longer than StopTimeout (1s) plus
// the grace, a stop of a consumer holding nothing waited for its read in
// progress, said it had abandoned handlers and did not leave the group.
// Block is now at most StopTimeout/2, so the read ends within StopTimeout:
// the stop returns nil and the consumer leaves.
func TestStop_IdleConsumerWithABlockLongerThanStopTimeout_ReturnsCleanlyAndLeaves(t *testing.T) {
	t.Parallel()
	srv := redistest.StartPrivate(t) // CLIENT LIST shows only this test's clients
	stream := redistest.Prefix(t) + "idle"
	cfg := Config{ClaimIdle: 30 * time.Second, Block: 5 * time.Second, StopTimeout: time.Second}
	s := newStreams(t, srv, cfg)
	if got := s.Config().Block; got != cfg.StopTimeout/2 {
		t.Errorf("Config().Block = %v, want StopTimeout/2 = %v", got, cfg.StopTimeout/2)
	}
	handled := make(chan struct{})
	if err := s.Handle(stream, func(context.Context, Message) error { close(handled); return nil }); err != nil {
		t.Fatal(err)
	}
	start(t, s)
	if _, err := s.Publish(context.Background(), stream, []byte("one")); err != nil {
		t.Fatal(err)
	}
	wait(t, handled, 10*time.Second, "the message handled")
	group := s.Config().Group
	deadline := time.Now().Add(10 * time.Second)
	for pendingCount(t, srv, stream, group) != 0 { // acknowledged
		if time.Now().After(deadline) {
			t.Fatal("the message was not acknowledged within 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	waitBlockedRead(t, srv) // the loop is blocked in its next XREADGROUP, holding nothing
	began := time.Now()
	err := s.Stop(context.Background())
	took := time.Since(began)
	if err != nil {
		t.Errorf("Stop of a consumer holding no message = %v, want nil", err)
	}
	if took > cfg.StopTimeout {
		t.Errorf("Stop took %v, more than StopTimeout %v", took, cfg.StopTimeout)
	}
	consumers, err := srv.Client().XInfoConsumers(context.Background(), stream, group).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range consumers {
		if c.Name == s.Config().Consumer {
			t.Errorf("consumer %q (%d pending) is still in the group after Stop", c.Name, c.Pending)
		}
	}
}

// waitBlockedRead waits (at most 10s) until a consumer of srv (a private
// server: CLIENT LIST shows only the test's clients) is blocked in
// XREADGROUP.
func waitBlockedRead(t *testing.T, srv *redistest.Server) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		list, err := srv.Client().ClientList(context.Background()).Result()
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(list, "flags=b") && strings.Contains(list, "cmd=xreadgroup") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no blocked XREADGROUP within 10s:\n%s", list)
		}
		time.Sleep(time.Millisecond)
	}
}

// A stop in which only a Redis call outlasted StopTimeout (no handler was
// running) said "handlers still running after StopTimeout … were
// cancelled": with a StopTimeout of 1 or 20 ms nearly every stop of an idle
// consumer did, since Redis ends a blocked read up to a clock tick (100 ms)
// after its Block; so did one whose Redis froze (found by an adversary).
// Nothing was cancelled or left behind: Stop returns nil.
func TestStop_OnlyARedisCallOutlastedStopTimeout_ReturnsNil(t *testing.T) {
	t.Parallel()
	for _, stopTimeout := range []time.Duration{time.Millisecond, 20 * time.Millisecond} {
		t.Run("idle, StopTimeout "+stopTimeout.String(), func(t *testing.T) {
			srv := redistest.StartPrivate(t)
			s := newStreams(t, srv, Config{ClaimIdle: 30 * time.Second, StopTimeout: stopTimeout})
			if got, want := s.Config().Block, max(stopTimeout/2, time.Millisecond); got != want {
				t.Errorf("Config().Block = %v, want %v (StopTimeout/2, at least 1 ms)", got, want)
			}
			if err := s.Handle(redistest.Prefix(t)+"tiny", func(context.Context, Message) error { return nil }); err != nil {
				t.Fatal(err)
			}
			for range 5 {
				start(t, s)
				waitBlockedRead(t, srv)
				if err := s.Stop(context.Background()); err != nil {
					t.Fatalf("Stop of an idle consumer = %v, want nil", err)
				}
			}
		})
	}
	t.Run("Redis frozen", func(t *testing.T) {
		srv := redistest.StartPrivate(t)
		proxy := faultproxy.Start(t, srv.Addr())
		c, err := storefx.New("default", storefx.Config{URL: "redis://" + proxy.Addr()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		s, err := New(c, Config{ClaimIdle: 30 * time.Second, StopTimeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Stop(context.Background()) })
		if err := s.Handle(redistest.Prefix(t)+"frozen", func(context.Context, Message) error {
			t.Error("a handler ran")
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		start(t, s)
		waitBlockedRead(t, srv)
		proxy.SetMode(faultproxy.Freeze)
		defer proxy.SetMode(faultproxy.Forward)
		if err := s.Stop(context.Background()); err != nil {
			t.Fatalf("Stop of a consumer that never ran a handler, Redis frozen = %v, want nil", err)
		}
	})
}

// A handler's context is cancelled when a stop gives up on it: when its
// StopTimeout runs out, or when the context passed to Stop ends first. A run
// so cancelled that still returns nil finished its work: it is
// acknowledged, not run again (helper-78 found the godoc saying otherwise).
func TestStop_CancelledRuns_NilAcknowledged_StopContextCancelsToo(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := context.Background()
	for _, c := range []struct {
		name    string
		cfg     Config
		stopCtx func() (context.Context, context.CancelFunc)
	}{
		{"StopTimeout ran out", Config{StopTimeout: 100 * time.Millisecond},
			func() (context.Context, context.CancelFunc) { return context.WithCancel(ctx) }},
		{"Stop's context ended first", Config{StopTimeout: time.Minute},
			func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, 200*time.Millisecond) }},
	} {
		stream := redistest.Prefix(t) + strings.ReplaceAll(c.name, " ", "-")
		s := newStreams(t, srv, c.cfg)
		inHand, cancelled := make(chan struct{}), make(chan struct{})
		if err := s.Handle(stream, func(hctx context.Context, _ Message) error {
			close(inHand)
			<-hctx.Done()
			close(cancelled)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		start(t, s)
		if _, err := s.Publish(ctx, stream, []byte("x")); err != nil {
			t.Fatal(err)
		}
		wait(t, inHand, 10*time.Second, "the message")
		stopCtx, cancel := c.stopCtx()
		_ = s.Stop(stopCtx)
		cancel()
		wait(t, cancelled, 10*time.Second, c.name+": the handler's cancellation")
		// Stop may return before the handler (its context ended): the
		// acknowledgement follows the handler's return, so it is awaited.
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			pending, err := srv.Client().XPending(ctx, stream, s.Config().Group).Result()
			if err != nil {
				t.Fatal(err)
			}
			if pending.Count == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the run that returned nil left %d messages pending, want it acknowledged", c.name, pending.Count)
			}
		}
	}
}
