package idempotencyfx

import (
	"context"
	"errors"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/redisfx/redisfx/internal/faultproxy"
	"github.com/redisfx/redisfx/internal/idemscript"
	"github.com/redisfx/redisfx/internal/redistest"
	"github.com/redisfx/redisfx/storefx"
	"github.com/redisfx/redisfx/tracingfx"
)

// tripHook counts round trips (a command or a pipeline) and holds the first
// script call's reply until hold is closed, so that the calls made meanwhile
// queue behind it.
type tripHook struct {
	single, piped, pipedCmds atomic.Int64
	held, hold               chan struct{}
	holding                  atomic.Bool
}

func (h *tripHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *tripHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if cmd.Name() == "evalsha" {
			h.single.Add(1)
			if h.holding.CompareAndSwap(false, true) {
				close(h.held)
				<-h.hold
			}
		}
		return err
	}
}
func (h *tripHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.piped.Add(1)
		h.pipedCmds.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// batchEnv is a store on addr whose first claim's reply is held.
func batchEnv(t *testing.T, addr string, retries int) (store, *tripHook) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true, ContextTimeoutEnabled: true, MaxRetries: retries,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}})
	t.Cleanup(func() { _ = rdb.Close() })
	if err := idemscript.Claim.Load(context.Background(), rdb).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := rdb.Pipelined(context.Background(), func(p redis.Pipeliner) error { return p.Ping(context.Background()).Err() }); err != nil {
		t.Fatal(err) // a connection for pipelines, dialled
	}
	h := &tripHook{held: make(chan struct{}), hold: make(chan struct{})}
	rdb.AddHook(h)
	return newStore(rdb, 0, 0), h
}

type claimed struct {
	c   claim
	err error
}

// queueClaims starts a claim of "first", holds its reply, and starts claims
// of keys, returning when they wait for the first's round trip.
func queueClaims(t *testing.T, s store, h *tripHook, ctxs []context.Context, keys []string) (first <-chan claimed, out []chan claimed) {
	t.Helper()
	one := make(chan claimed, 1)
	go func() {
		c, _, err := s.claim(context.Background(), "first", "fp", "o-first", time.Minute, false)
		one <- claimed{c, err}
	}()
	<-h.held
	for i, k := range keys {
		ch := make(chan claimed, 1)
		out = append(out, ch)
		go func() {
			c, _, err := s.claim(ctxs[i], k, "fp", "o-"+strconv.Itoa(i), time.Minute, false)
			ch <- claimed{c, err}
		}()
	}
	waitFor(t, func() bool { return queued(s, "") == len(keys) })
	return one, out
}

// queued is how many claims wait in node's queue.
func queued(s store, node string) int {
	b := s.batchers[idemscript.Claim]
	b.mu.Lock()
	defer b.mu.Unlock()
	if q := b.queues[node]; q != nil {
		return len(q.calls)
	}
	return 0
}

func contexts(n int) []context.Context {
	ctxs := make([]context.Context, n)
	for i := range ctxs {
		ctxs[i] = context.Background()
	}
	return ctxs
}

// Claims made while one is in flight go out as one pipeline when it
// returns, and each caller gets its own reply: one claim of a key is
// granted, the other owners' find it in progress and name its owner.
func TestBatcher_ConcurrentClaimsShareARoundTrip(t *testing.T) {
	srv := redistest.StartPrivate(t)
	s, h := batchEnv(t, srv.Addr(), 0)
	keys := []string{"a", "b", "c", "a", "d", "a"}
	first, out := queueClaims(t, s, h, contexts(len(keys)), keys)
	close(h.hold)
	if r := <-first; r.err != nil || r.c.kind != claimNew {
		t.Fatalf("first: %+v", r)
	}
	var winner string // of "a", claimed thrice: the first claim in the pipeline's order
	results := make([]claimed, len(out))
	for i, ch := range out {
		results[i] = <-ch
		if r := results[i]; keys[i] == "a" && r.c.kind == claimNew {
			winner += "o-" + strconv.Itoa(i)
		}
	}
	for i, r := range results {
		ok := r.err == nil && r.c.kind == claimNew && r.c.token != 0
		if keys[i] == "a" && "o-"+strconv.Itoa(i) != winner {
			ok = r.err == nil && r.c.kind == claimInProgress && r.c.owner == winner
		}
		if !ok {
			t.Errorf("claim %d of %s: %+v %v (granted: %q)", i, keys[i], r.c, r.err, winner)
		}
	}
	if s, p, n := h.single.Load(), h.piped.Load(), h.pipedCmds.Load(); s != 1 || p != 1 || n != int64(len(keys)) {
		t.Fatalf("round trips: %d single, %d pipelines of %d claims; want 1, 1 of %d", s, p, n, len(keys))
	}
	// A lone claim goes out at once, as a single command.
	if _, _, err := s.claim(context.Background(), "e", "fp", "o-e", time.Minute, false); err != nil || h.single.Load() != 2 {
		t.Fatalf("lone claim: %v, %d single round trips", err, h.single.Load())
	}
}

// A caller whose context ends while it waits returns at once with its
// context's error, and its claim, not yet sent, is not sent; the others'
// are.
func TestBatcher_CancelledCallerLeavesAlone(t *testing.T) {
	srv := redistest.StartPrivate(t)
	s, h := batchEnv(t, srv.Addr(), 0)
	ctxs := contexts(2)
	ctx, cancel := context.WithCancel(context.Background())
	ctxs[0] = ctx
	first, out := queueClaims(t, s, h, ctxs, []string{"gone", "stays"})
	cancel()
	if r := <-out[0]; !errors.Is(r.err, context.Canceled) {
		t.Fatalf("cancelled caller: %+v %v", r.c, r.err)
	}
	close(h.hold)
	<-first
	if r := <-out[1]; r.err != nil || r.c.kind != claimNew {
		t.Fatalf("the other: %+v %v", r.c, r.err)
	}
	if n := srv.Client().Exists(context.Background(), "gone").Val(); n != 0 || h.pipedCmds.Load() != 1 {
		t.Fatalf("the cancelled claim was sent: key exists %d, %d claims piped", n, h.pipedCmds.Load())
	}
}

// The pipeline's connection is cut after Redis ran its claims, before their
// replies arrive: with go-redis's re-sends each claim is granted again to
// its owner (the claim script knows its own owner); without, each caller
// gets the connection's error, as a single claim would, and none a reply
// that is not its own.
func TestBatcher_ConnectionCutMidPipeline(t *testing.T) {
	for _, retries := range []int{0, -1} {
		t.Run("MaxRetries="+strconv.Itoa(retries), func(t *testing.T) {
			srv := redistest.StartPrivate(t)
			p := faultproxy.Start(t, srv.Addr())
			s, h := batchEnv(t, p.Addr(), retries)
			keys := []string{"k0", "k1", "k2", "k3"}
			first, out := queueClaims(t, s, h, contexts(len(keys)), keys)
			woke := srv.Sleep(300 * time.Millisecond)
			before := p.Sent()
			close(h.hold)
			<-first
			waitFor(t, func() bool { return p.Sent() >= before+int64(40*len(keys)) }) // the pipeline is in Redis's socket
			conns := p.Conns()
			for _, c := range conns {
				c.SetMode(faultproxy.Freeze)
			}
			<-woke
			admin := srv.Client()
			waitFor(t, func() bool { return admin.Exists(context.Background(), keys...).Val() == int64(len(keys)) }) // Redis ran them
			for _, c := range conns {
				c.Cut()
			}
			for i, ch := range out {
				r := <-ch
				n, _ := admin.HGet(context.Background(), keys[i], "n").Int64()
				if retries == 0 && (r.err != nil || r.c.kind != claimNew || r.c.token != n) {
					t.Errorf("claim of %s: %+v %v, want granted again with token %d", keys[i], r.c, r.err, n)
				}
				if retries < 0 && (r.err == nil || !answerLost(r.err)) {
					t.Errorf("claim of %s: %+v %v, want the connection's error", keys[i], r.c, r.err)
				}
			}
		})
	}
}

// sampleNamed samples the traces whose root span has its name.
type sampleNamed string

func (n sampleNamed) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	if p.Name == string(n) {
		return sdktrace.SamplingResult{Decision: sdktrace.RecordAndSample}
	}
	return sdktrace.SamplingResult{Decision: sdktrace.Drop}
}
func (n sampleNamed) Description() string { return "named " + string(n) }

// A claim of a recorded trace goes out alone, at once, while a round trip is
// in flight, and so has its own redis.EVALSHA span under its caller's span;
// the unsampled claims made meanwhile still share a pipeline.
func TestBatcher_RecordedCallGoesAlone(t *testing.T) {
	srv := redistest.StartPrivate(t)
	s, h := batchEnv(t, srv.Addr(), 0)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.ParentBased(sampleNamed("sampled"))), sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	s.rdb.AddHook(tracingfx.Instrumentation(tp, tracingfx.SpanConfig{}, nil)(storefx.ClientInfo{Name: "default", Network: "tcp", Node: srv.Addr()}))
	tracer := tp.Tracer("test")
	ctxs := contexts(2)
	for i := range ctxs {
		ctxs[i], _ = tracer.Start(ctxs[i], "unsampled")
	}
	first, out := queueClaims(t, s, h, ctxs, []string{"u0", "u1"})

	ctx, span := tracer.Start(context.Background(), "sampled")
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second) // queued, it would wait for the held reply
	c, _, err := s.claim(ctx, "traced", "fp", "o-traced", time.Minute, false)
	cancel()
	span.End()
	if n := queued(s, ""); err != nil || c.kind != claimNew || n != 2 {
		t.Errorf("recorded claim: %+v %v, %d queued", c, err, n)
	}
	close(h.hold)
	<-first
	for i, ch := range out {
		if r := <-ch; r.err != nil || r.c.kind != claimNew {
			t.Errorf("unsampled claim %d: %+v %v", i, r.c, r.err)
		}
	}
	if p, n := h.piped.Load(), h.pipedCmds.Load(); p != 1 || n != 2 {
		t.Fatalf("%d pipelines of %d claims, want 1 of 2", p, n)
	}
	var names []string
	for _, s := range rec.Ended() {
		names = append(names, s.Name())
		if s.Name() == "redis.EVALSHA" && s.Parent().SpanID() != span.SpanContext().SpanID() {
			t.Errorf("redis.EVALSHA's parent is %v, not the caller's span", s.Parent().SpanID())
		}
	}
	if !slices.Equal(names, []string{"redis.EVALSHA", "sampled"}) {
		t.Fatalf("spans %q, want the recorded claim's redis.EVALSHA and its caller's", names)
	}
}

// On a Cluster each master has its own queue (a Cluster pipeline waits for
// every node it goes to): while a claim waits on a paused master, a claim
// of a key on another master goes out at once.
func TestBatcher_Cluster_PausedMasterHoldsOnlyItsOwn(t *testing.T) {
	if os.Getenv("REDISFX_TEST_CLUSTER") == "" {
		t.Skip("a Cluster test: make test-cluster (REDISFX_TEST_CLUSTER=1)")
	}
	cl := redistest.StartCluster(t, 3, 0)
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), DisableIdentity: true, ReadTimeout: time.Minute,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}})
	t.Cleanup(func() { _ = rdb.Close() })
	s := newStore(rdb, 0, 0)
	slow, fast := cl.MasterOf("slow"), "fast"
	for i := 0; cl.MasterOf(fast) == slow; i++ {
		fast = "fast" + strconv.Itoa(i)
	}
	admin := slow.Client()
	if err := admin.Do(context.Background(), "CLIENT", "PAUSE", time.Minute.Milliseconds(), "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	held := make(chan claimed, 1)
	go func() {
		c, _, err := s.claim(context.Background(), "slow", "fp", "o-slow", time.Minute, false)
		held <- claimed{c, err}
	}()
	waitFor(t, func() bool { // the claim waits in the paused master
		return strings.Contains(admin.Info(context.Background(), "clients").Val(), "blocked_clients:1")
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	c, _, err := s.claim(ctx, fast, "fp", "o-fast", time.Minute, false)
	cancel()
	if err := admin.Do(context.Background(), "CLIENT", "UNPAUSE").Err(); err != nil {
		t.Fatal(err)
	}
	if err != nil || c.kind != claimNew {
		t.Errorf("claim on a healthy master: %+v %v", c, err)
	}
	if r := <-held; r.err != nil || r.c.kind != claimNew {
		t.Fatalf("claim on the paused master: %+v %v", r.c, r.err)
	}
}
