package streamfx

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	zapobserver "go.uber.org/zap/zaptest/observer"

	"github.com/redisfx/redisfx/internal/obstest"
	"github.com/redisfx/redisfx/internal/redistest"
	"github.com/redisfx/redisfx/storefx"
)

// runLog records each handler run of each message, by payload, and every
// moment two runs of one message overlapped.
type runLog struct {
	mu       sync.Mutex
	active   map[string]int
	runs     map[string]int
	overlaps int
}

func newRunLog() *runLog { return &runLog{active: map[string]int{}, runs: map[string]int{}} }

func (l *runLog) begin(k string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.runs[k]++
	l.active[k]++
	if l.active[k] > 1 {
		l.overlaps++
	}
}

func (l *runLog) end(k string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.active[k]--
}

// Issue 15: a batch's messages waiting for their turn (Concurrency 1) were
// not touched, so after ClaimIdle another consumer claimed and ran them
// while the first consumer still would: with ClaimIdle 300ms, a 200ms
// handler and 6 messages, m2..m5 each ran twice (7 overlapping runs).
// Every message a consumer holds is now kept touched, so each runs once.
func TestWaitingMessagesOfABatchAreNotClaimedByAnother(t *testing.T) {
	t.Parallel()
	srv := redistest.StartPrivate(t)
	stream := redistest.Prefix(t) + "batch"
	ctx := context.Background()
	raw := srv.Client()
	raw.XGroupCreateMkStream(ctx, stream, "redisfx", "0")
	for i := range 6 {
		raw.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{FieldData, fmt.Sprint("m", i)}})
	}
	log := newRunLog()
	all := make(chan struct{})
	var once sync.Once
	handler := func(_ context.Context, m Message) error {
		log.begin(string(m.Data))
		time.Sleep(200 * time.Millisecond) // the handler's work
		log.end(string(m.Data))
		log.mu.Lock()
		if len(log.runs) == 6 {
			once.Do(func() { close(all) })
		}
		log.mu.Unlock()
		return nil
	}
	first := newStreams(t, srv, Config{Consumer: "first", ClaimIdle: 300 * time.Millisecond})
	_ = first.Handle(stream, handler)
	start(t, first) // reads the six in one batch
	second := newStreams(t, srv, Config{Consumer: "second", ClaimIdle: 300 * time.Millisecond})
	_ = second.Handle(stream, handler)
	start(t, second)
	wait(t, all, 20*time.Second, "six messages")
	for _, s := range []*Streams{first, second} {
		if err := s.Stop(ctx); err != nil {
			t.Fatal(err)
		}
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	for k, n := range log.runs {
		if n != 1 {
			t.Errorf("%s ran %d times", k, n)
		}
	}
	if log.overlaps > 0 {
		t.Errorf("%d runs overlapped another run of the same message", log.overlaps)
	}
	if n := pendingCount(t, srv, stream, "redisfx"); n != 0 {
		t.Fatalf("%d left pending", n)
	}
}

// Issue 15: a message whose handler StopTimeout cancelled on its last
// attempt was dead-lettered. A stop costs no attempt: the message stays
// pending with its delivery count given back, and the next consumer runs
// it as the same attempt.
func TestStop_CancelledLastAttemptIsNotDeadLettered(t *testing.T) {
	t.Parallel()
	srv := redistest.StartPrivate(t)
	stream := redistest.Prefix(t) + "cancelled"
	ctx := context.Background()
	cfg := Config{MaxAttempts: 1, ClaimIdle: 200 * time.Millisecond, StopTimeout: 100 * time.Millisecond}
	s := newStreams(t, srv, cfg)
	inHand := make(chan struct{})
	_ = s.Handle(stream, func(ctx context.Context, _ Message) error { close(inHand); <-ctx.Done(); return ctx.Err() })
	start(t, s)
	id, err := s.Publish(ctx, stream, []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	wait(t, inHand, 10*time.Second, "the message")
	if err := s.Stop(ctx); err == nil || !strings.Contains(err.Error(), "StopTimeout") {
		t.Fatalf("stop = %v", err)
	}
	raw := srv.Client()
	if n := raw.XLen(ctx, stream+DLQSuffix).Val(); n != 0 {
		t.Fatalf("a message cancelled by the stop was dead-lettered (%d entries)", n)
	}
	p := raw.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: stream, Group: "redisfx", Start: "-", End: "+", Count: 10}).Val()
	if len(p) != 1 || p[0].ID != id || p[0].RetryCount != 0 {
		t.Fatalf("pending after the stop: %+v (want %s with its delivery given back)", p, id)
	}
	cfg.StopTimeout = 0 // the default: enough for a read in progress
	next := newStreams(t, srv, cfg)
	got := make(chan Message, 1)
	_ = next.Handle(stream, func(_ context.Context, m Message) error { got <- m; return nil })
	start(t, next)
	select {
	case m := <-got:
		if m.ID != id || m.Attempt != 1 {
			t.Fatalf("ran again as %+v", m)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the cancelled message never ran again")
	}
	if err := next.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if n := raw.XLen(ctx, stream+DLQSuffix).Val(); n != 0 || pendingCount(t, srv, stream, "redisfx") != 0 {
		t.Fatalf("dead-letter entries %d, pending %d", n, pendingCount(t, srv, stream, "redisfx"))
	}
}

// Issue 15: Stop(context.Background()) hung forever on a handler that
// ignores its context. Stop now returns within StopTimeout plus the grace
// (2×StoreTimeout) whatever the handler does; the abandoned message stays
// pending and another consumer claims it after ClaimIdle.
func TestStop_BoundedWhenAHandlerIgnoresItsContext(t *testing.T) {
	t.Parallel()
	srv := redistest.StartPrivate(t)
	stream := redistest.Prefix(t) + "stubborn"
	ctx := context.Background()
	cfg := Config{ClaimIdle: 200 * time.Millisecond, StopTimeout: 100 * time.Millisecond, StoreTimeout: 300 * time.Millisecond}
	s := newStreams(t, srv, cfg)
	inHand, release := make(chan struct{}), make(chan struct{})
	defer close(release) // the abandoned handler returns before the leak check
	_ = s.Handle(stream, func(context.Context, Message) error { close(inHand); <-release; return nil })
	start(t, s)
	id, _ := s.Publish(ctx, stream, []byte("x"))
	wait(t, inHand, 10*time.Second, "the message")
	stopped := make(chan error, 1)
	began := time.Now()
	go func() { stopped <- s.Stop(context.Background()) }()
	select {
	case err := <-stopped:
		if err == nil {
			t.Fatal("Stop abandoned a handler and said nothing")
		}
		if d, bound := time.Since(began), cfg.StopTimeout+2*cfg.StoreTimeout+time.Second; d > bound {
			t.Fatalf("Stop took %v (bound %v)", d, bound)
		}
	case <-time.After(10 * time.Second):
		release <- struct{}{} // let the hung Stop finish before the test ends
		<-stopped
		t.Fatal("Stop(context.Background()) hung on a handler that ignores its context")
	}
	next := newStreams(t, srv, cfg)
	got := make(chan Message, 1)
	_ = next.Handle(stream, func(_ context.Context, m Message) error { got <- m; return nil })
	start(t, next)
	select {
	case m := <-got:
		if m.ID != id {
			t.Fatalf("claimed %+v", m)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the abandoned message was never claimed again")
	}
}

// A waiting message this consumer lost (here taken by force while the
// batch's first message runs) is not run by it: it belongs to its new owner.
func TestLostWaitingMessageIsNotRun(t *testing.T) {
	t.Parallel()
	srv := redistest.StartPrivate(t)
	stream := redistest.Prefix(t) + "lost"
	ctx := context.Background()
	raw := srv.Client()
	raw.XGroupCreateMkStream(ctx, stream, "redisfx", "0")
	var ids []string
	for i := range 3 {
		ids = append(ids, raw.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{FieldData, fmt.Sprint("m", i)}}).Val())
	}
	s := newStreams(t, srv, Config{Consumer: "holder", ClaimIdle: 300 * time.Millisecond})
	log := newRunLog()
	done := make(chan struct{})
	_ = s.Handle(stream, func(_ context.Context, m Message) error {
		log.begin(m.ID)
		defer log.end(m.ID)
		switch m.ID {
		case ids[0]:
			// Another consumer takes m2 while it waits; a touch round
			// (every ClaimIdle/4) passes before m2's turn.
			if err := raw.XClaimJustID(ctx, &redis.XClaimArgs{Stream: stream, Group: "redisfx", Consumer: "thief", Messages: []string{ids[2]}}).Err(); err != nil {
				t.Error(err)
			}
			time.Sleep(200 * time.Millisecond)
		case ids[1]:
			time.Sleep(100 * time.Millisecond)
			close(done)
		}
		return nil
	})
	start(t, s)
	wait(t, done, 10*time.Second, "m1")
	if err := s.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	if log.runs[ids[2]] != 0 || log.runs[ids[0]] != 1 || log.runs[ids[1]] != 1 {
		t.Fatalf("runs %v: the lost message must not run, the others once", log.runs)
	}
	p := raw.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: stream, Group: "redisfx", Start: "-", End: "+", Count: 10}).Val()
	if len(p) != 1 || p[0].ID != ids[2] || p[0].Consumer != "thief" {
		t.Fatalf("pending %+v: want only m2, held by its new owner", p)
	}
}

// At a stop, the messages of a batch not started yet are given back at
// once (delivery count restored, claimable at once), even while a handler
// of the batch ignores its cancellation and is abandoned.
func TestStop_WaitingMessagesAreGivenBackAtOnce(t *testing.T) {
	t.Parallel()
	srv := redistest.StartPrivate(t)
	stream := redistest.Prefix(t) + "waiting"
	ctx := context.Background()
	raw := srv.Client()
	raw.XGroupCreateMkStream(ctx, stream, "redisfx", "0")
	var ids []string
	for i := range 3 {
		ids = append(ids, raw.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{FieldData, fmt.Sprint("m", i)}}).Val())
	}
	cfg := Config{Consumer: "stopping", ClaimIdle: time.Second, StopTimeout: 50 * time.Millisecond, StoreTimeout: 200 * time.Millisecond}
	s := newStreams(t, srv, cfg)
	inHand, release := make(chan struct{}), make(chan struct{})
	defer close(release)
	_ = s.Handle(stream, func(_ context.Context, m Message) error {
		if m.ID == ids[0] {
			close(inHand)
			<-release // ignores its context
		}
		return nil
	})
	start(t, s)
	wait(t, inHand, 10*time.Second, "m0")
	if err := s.Stop(ctx); err == nil {
		t.Fatal("Stop abandoned a handler and said nothing")
	}
	p := raw.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: stream, Group: "redisfx", Start: "-", End: "+", Count: 10}).Val()
	if len(p) != 3 {
		t.Fatalf("pending %+v", p)
	}
	for _, e := range p[1:] {
		if e.RetryCount != 0 || e.Idle < cfg.ClaimIdle {
			t.Errorf("%s not given back at once: delivered %d times, idle %v", e.ID, e.RetryCount, e.Idle)
		}
	}
	if p[0].RetryCount != 1 {
		t.Errorf("the abandoned m0: delivered %d times, want 1 (counted, as after a crash)", p[0].RetryCount)
	}
}

// abandonAfterASuccess runs, on a consumer A, a batch of two messages: m1's
// handler returns nil at once, m2's ignores its context until the test
// ends, so a stop of A abandons it. It returns when A's Stop has returned,
// with m1's id; B is then started with handle on the same group.
func abandonAfterASuccess(t *testing.T, cfg Config, handle Handler) (srv *redistest.Server, stream, m1 string) {
	t.Helper()
	srv = redistest.Start(t)
	stream = redistest.Prefix(t) + "abandon"
	ctx := context.Background()
	raw := srv.Client()
	if err := raw.XGroupCreateMkStream(ctx, stream, "redisfx", "0").Err(); err != nil {
		t.Fatal(err)
	}
	m1 = raw.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{FieldData, "m1"}}).Val()
	raw.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{FieldData, "m2"}})
	a := newStreams(t, srv, cfg)
	m1done, m2started, release := make(chan struct{}), make(chan struct{}), make(chan struct{})
	t.Cleanup(func() { close(release); a.wg.Wait() }) // the abandoned handler returns before the leak check
	if err := a.Handle(stream, func(_ context.Context, m Message) error {
		if string(m.Data) == "m1" {
			close(m1done)
			return nil
		}
		close(m2started)
		<-release // ignores its context
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	start(t, a)
	wait(t, m1done, 10*time.Second, "m1 handled on A")
	wait(t, m2started, 10*time.Second, "m2 started on A")
	if err := a.Stop(ctx); err == nil || !strings.Contains(err.Error(), "abandoned") {
		t.Fatalf("A's Stop = %v, want m2's handler abandoned", err)
	}
	b := newStreams(t, srv, cfg)
	if err := b.Handle(stream, handle); err != nil {
		t.Fatal(err)
	}
	start(t, b)
	return srv, stream, m1
}

// Found by an adversary: the successes of a batch were acknowledged only
// once the whole batch was done, so when a stop abandoned another handler
// of the batch, a message whose handler had returned nil was never
// acknowledged, was claimed by another consumer after ClaimIdle and, on
// its last attempt (MaxAttempts 1), dead-lettered ("delivered 1 times
// without being acknowledged"). Each success is now acknowledged as soon
// as its handler returns.
func TestStop_AbandonedHandler_DoesNotDeadLetterASucceededMessageOfItsBatch(t *testing.T) {
	t.Parallel()
	cfg := Config{MaxAttempts: 1, ClaimIdle: 300 * time.Millisecond, BatchSize: 2, Concurrency: 2,
		StopTimeout: 100 * time.Millisecond, StoreTimeout: 200 * time.Millisecond}
	var mu sync.Mutex
	var onB []string
	srv, stream, m1 := abandonAfterASuccess(t, cfg, func(_ context.Context, m Message) error {
		mu.Lock()
		defer mu.Unlock()
		onB = append(onB, string(m.Data))
		return nil
	})
	// m2, abandoned on its last attempt, is dead-lettered by B once idle
	// for ClaimIdle; m1, had it not been acknowledged, would be idle as long
	// (both were touched together until the stop), and go first.
	ctx := context.Background()
	deadline := time.Now().Add(10 * time.Second)
	for srv.Client().XLen(ctx, stream+DLQSuffix).Val() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the abandoned m2 was not dead-lettered within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, e := range srv.Client().XRange(ctx, stream+DLQSuffix, "-", "+").Val() {
		if e.Values[FieldOriginalID] == m1 {
			t.Errorf("m1 (%s), whose handler returned nil, was dead-lettered: %v", m1, e.Values)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(onB) != 0 {
		t.Errorf("B ran %v; m1 had succeeded and m2 was on its last attempt", onB)
	}
}

// The same with the defaults (BatchSize 10, Concurrency 1, MaxAttempts 3):
// m1 succeeded, then m2's handler was abandoned by the stop. m1 used to run
// again on B, as Attempt 2, although neither a failure, a crash, a stop of
// its run nor a lost acknowledgement happened to it.
func TestStop_AbandonedHandler_DoesNotRunAgainAnEarlierSuccessOfItsBatch(t *testing.T) {
	t.Parallel()
	cfg := Config{ClaimIdle: 300 * time.Millisecond, StopTimeout: 100 * time.Millisecond, StoreTimeout: 200 * time.Millisecond}
	var mu sync.Mutex
	var onB []string
	m2onB := make(chan struct{})
	abandonAfterASuccess(t, cfg, func(_ context.Context, m Message) error {
		mu.Lock()
		defer mu.Unlock()
		onB = append(onB, fmt.Sprintf("%s attempt %d", m.Data, m.Attempt))
		if string(m.Data) == "m2" {
			close(m2onB)
		}
		return nil
	})
	// m2 is claimed by B after ClaimIdle; m1, had it not been acknowledged,
	// would be claimed with it and run first (stream order, Concurrency 1).
	wait(t, m2onB, 10*time.Second, "the abandoned m2 run on B")
	mu.Lock()
	defer mu.Unlock()
	if len(onB) != 1 || onB[0] != "m2 attempt 2" {
		t.Errorf("runs on B: %v, want only m2 attempt 2 (m1 had succeeded on A)", onB)
	}
}

// nilError is an error type whose Error method dereferences its receiver.
type nilError struct{ msg string }

func (e *nilError) Error() string { return e.msg }

// findNothing returns a typed nil *nilError as an error: the classic
// non-nil interface holding a nil pointer.
func findNothing() error {
	var e *nilError
	return e
}

// selfPanicError's Error panics with a selfPanicError: printing the panic's
// value panics again, which fmt re-raises and the runtime cannot print.
type selfPanicError struct{}

func (selfPanicError) Error() string { panic(selfPanicError{}) }

// brokenHandlers are handlers whose error, or panic, cannot be described
// the ordinary way, by the name the child process is given.
var brokenHandlers = map[string]struct {
	handler Handler
	want    string // in dlq_error
}{
	"typed-nil":       {func(context.Context, Message) error { return findNothing() }, "<a *streamfx.nilError whose Error method panics>"},
	"self-panicking":  {func(context.Context, Message) error { return selfPanicError{} }, "<a streamfx.selfPanicError whose Error method panics>"},
	"panic-with-self": {func(context.Context, Message) error { panic(selfPanicError{}) }, "<a streamfx.selfPanicError whose Error or String method panics>"},
}

// Found by adversaries: a handler's error whose Error method panics (a
// typed nil pointer returned as an error) crashed the whole process: the
// consumer called err.Error() for the span and the dead-letter entry
// outside the handler's recover; then, an error whose Error panics with
// itself, returned or raised as the panic, still did ("panic while printing
// panic value": fmt re-raises such a panic). Each is now a failure like any
// other: on the last attempt the message is dead-lettered, the error
// described by its type. The consumer runs in a child process, so that the
// crash, if it comes, fails this test instead of the test binary.
func TestHandlerErrorWhoseErrorMethodPanics_IsAFailure_NotACrash(t *testing.T) {
	if arg := os.Getenv("STREAMFX_BROKEN_ERROR_CHILD"); arg != "" {
		name, url, _ := strings.Cut(arg, "|")
		brokenErrorChild(t, url, name)
		return
	}
	t.Parallel()
	srv := redistest.Start(t) // the parent's: a crashed child leaves no redis-server behind
	for name := range brokenHandlers {
		cmd := exec.Command(os.Args[0], "-test.run", "^TestHandlerErrorWhoseErrorMethodPanics_IsAFailure_NotACrash$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), "STREAMFX_BROKEN_ERROR_CHILD="+name+"|"+srv.URL())
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS") {
			if len(out) > 3000 {
				out = out[:3000]
			}
			t.Fatalf("%s: the process running the handler failed or crashed (%v):\n%s", name, err, out)
		}
	}
}

func brokenErrorChild(t *testing.T, url, name string) {
	broken := brokenHandlers[name]
	c, err := storefx.New("default", storefx.Config{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	stream := redistest.Prefix(t) + "brokenerr"
	ctx := context.Background()
	s, err := New(c, Config{MaxAttempts: 1, ClaimIdle: 200 * time.Millisecond}, WithTracerProvider(obstest.NewSpans(t).Tracer()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	if err := s.Handle(stream, broken.handler); err != nil {
		t.Fatal(err)
	}
	start(t, s)
	if _, err := s.Publish(ctx, stream, []byte("x")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for c.XLen(ctx, stream+DLQSuffix).Val() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("not dead-lettered within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	dlq := c.XRange(ctx, stream+DLQSuffix, "-", "+").Val()
	if got, _ := dlq[0].Values[FieldError].(string); !strings.Contains(got, broken.want) {
		t.Errorf("dlq_error = %q, want %q", got, broken.want)
	}
}

// A touch sent just before a batch's XACK can reach Redis after it and find
// the message no longer pending: with acknowledgements sent as each handler
// returns (while the batch is still touched), a lone consumer whose every
// message succeeded logged "claimed by another" dozens of times (ClaimIdle
// 20 ms, 2000 messages; found by an adversary). A message whose XACK is on
// its way is not judged by a touch.
func TestAcks_WhileTouched_NoFalseClaimedByAnother(t *testing.T) {
	t.Parallel()
	srv := redistest.StartPrivate(t)
	core, logs := zapobserver.New(zap.WarnLevel)
	s := newStreams(t, srv, Config{ClaimIdle: 20 * time.Millisecond, BatchSize: 50, Concurrency: 4}, WithLogger(zap.New(core)))
	stream := redistest.Prefix(t) + "acks"
	const n = 2000
	var runs atomic.Int64
	done := make(chan struct{})
	if err := s.Handle(stream, func(context.Context, Message) error {
		time.Sleep(200 * time.Microsecond) // the handler's work: touches go out meanwhile
		if runs.Add(1) == n {
			close(done)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for range n {
		if _, err := s.Publish(ctx, stream, []byte("m")); err != nil {
			t.Fatal(err)
		}
	}
	start(t, s)
	wait(t, done, 60*time.Second, "all handled")
	if err := s.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if r := runs.Load(); r != n {
		t.Errorf("%d runs of %d messages", r, n)
	}
	if p := pendingCount(t, srv, stream, s.Config().Group); p != 0 {
		t.Errorf("%d pending after all succeeded", p)
	}
	if claimed := logs.FilterMessage("stream message held by this consumer was claimed by another").Len(); claimed > 0 {
		t.Errorf("%d warnings \"claimed by another\" from a lone consumer whose every message succeeded", claimed)
	}
}
