package storefx_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisfx/redisfx/internal/faultproxy"
	"github.com/redisfx/redisfx/internal/redistest"
	"github.com/redisfx/redisfx/storefx"
)

// sentCounter is an Instrumentation whose hook sits inside the breaker: it
// counts the commands actually sent to Redis, by name.
type sentCounter struct {
	mu   sync.Mutex
	sent map[string]int
}

func (s *sentCounter) instrumentation(storefx.ClientInfo) redis.Hook { return s }

func (s *sentCounter) count(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sent[name]
}

func (s *sentCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (s *sentCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		s.mu.Lock()
		s.sent[cmd.Name()]++
		s.mu.Unlock()
		return next(ctx, cmd)
	}
}

func (s *sentCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		s.mu.Lock()
		for _, c := range cmds {
			s.sent[c.Name()]++
		}
		s.mu.Unlock()
		return next(ctx, cmds)
	}
}

func newBreakerClient(t *testing.T, addr string, b storefx.BreakerConfig) (*storefx.Client, *sentCounter) {
	t.Helper()
	return newCountedClient(t, storefx.Config{URL: "redis://" + addr, Breaker: b, DialTimeout: 200 * time.Millisecond})
}

func newCountedClient(t *testing.T, cfg storefx.Config) (*storefx.Client, *sentCounter) {
	t.Helper()
	sc := &sentCounter{sent: map[string]int{}}
	c, err := storefx.New("default", cfg, sc.instrumentation)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, sc
}

func get(c interface {
	Get(context.Context, string) *redis.StringCmd
}, key string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return c.Get(ctx, key).Err()
}

// waitState waits (bounded) until the breaker is in state want.
func waitState(t *testing.T, c *storefx.Client, want storefx.BreakerState, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for c.Breaker().State != want {
		if time.Now().After(deadline) {
			t.Fatalf("breaker %v after %v, want %v (%+v)", c.Breaker().State, within, want, c.Breaker())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Redis killed: the breaker opens after Failures consecutive failures; while
// it is open commands fail with ErrCircuitOpen and none reaches Redis
// (only the background probes' PINGs are sent); it closes by itself once
// Redis is back, and commands are sent again.
func TestBreaker_RedisKilled_OpensRefusesWithoutSendingClosesAfterRecovery(t *testing.T) {
	t.Parallel()
	srv := redistest.StartPrivate(t)
	c, sent := newBreakerClient(t, srv.Addr(), storefx.BreakerConfig{Failures: 3, ProbeInterval: 20 * time.Millisecond, ProbeTimeout: 200 * time.Millisecond})
	if err := get(c, "k", time.Second); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET with Redis up: %v", err)
	}
	srv.Kill()
	// Refused dials count too: it may open within the first command.
	for i := 0; c.Breaker().Opened == 0; i++ {
		if err := get(c, "k", 300*time.Millisecond); i == 3 || err == nil || errors.Is(err, storefx.ErrCircuitOpen) {
			t.Fatalf("failure %d: %v, want a network error, and the breaker open after 3 (%+v)", i+1, err, c.Breaker())
		}
	}
	if st := c.Breaker(); st.State == storefx.BreakerClosed || st.Opened != 1 {
		t.Fatalf("after the failures: %+v, want open once", st)
	}
	gets := sent.count("get")
	for i := 0; i < 200; i++ {
		if err := get(c, "k", time.Second); !errors.Is(err, storefx.ErrCircuitOpen) {
			t.Fatalf("GET %d while open: %v, want ErrCircuitOpen", i, err)
		}
	}
	pipe := c.Pipeline()
	pipe.Get(context.Background(), "a")
	pipe.Get(context.Background(), "b")
	if _, err := pipe.Exec(context.Background()); !errors.Is(err, storefx.ErrCircuitOpen) {
		t.Fatalf("pipeline while open: %v, want ErrCircuitOpen", err)
	}
	if n := sent.count("get") - gets; n != 0 {
		t.Fatalf("%d GETs sent to Redis while the breaker was open, want 0", n)
	}
	if st := c.Breaker(); st.Refused < 201 {
		t.Fatalf("refused %d, want at least 201", st.Refused)
	}
	// Probes keep trying while Redis is down.
	deadline := time.Now().Add(5 * time.Second)
	for c.Breaker().ProbeFailures < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("no failed probes while Redis is down: %+v", c.Breaker())
		}
		time.Sleep(5 * time.Millisecond)
	}
	srv.Start()
	waitState(t, c, storefx.BreakerClosed, 10*time.Second)
	if err := get(c, "k", time.Second); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET after recovery: %v", err)
	}
	if n := sent.count("get") - gets; n != 1 {
		t.Fatalf("%d GETs sent after recovery, want 1", n)
	}
	if st := c.Breaker(); st.Opened != 1 || sent.count("ping") == 0 {
		t.Fatalf("after recovery: %+v, %d PINGs", st, sent.count("ping"))
	}
}

// Frozen Redis (the connection holds every byte): the breaker opens on
// timeouts; a probe whose PING hangs keeps it half-open, refusing every
// command at once; when the connection thaws, that PING's answer closes it.
func TestBreaker_FrozenRedis_HalfOpenProbeClosesOnThaw(t *testing.T) {
	t.Parallel()
	srv := redistest.StartPrivate(t)
	proxy := faultproxy.Start(t, srv.Addr())
	// Timed out by the client's ReadTimeout: the probe's 30s would not count
	// a caller's shorter deadline.
	c, sent := newCountedClient(t, storefx.Config{URL: "redis://" + proxy.Addr(), DialTimeout: 200 * time.Millisecond, ReadTimeout: 100 * time.Millisecond,
		Breaker: storefx.BreakerConfig{Failures: 2, ProbeInterval: 10 * time.Millisecond, ProbeTimeout: 30 * time.Second}})
	if err := get(c, "k", time.Second); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET with Redis up: %v", err)
	}
	proxy.SetMode(faultproxy.Freeze)
	for i := 0; i < 2; i++ {
		if err := get(c, "k", 5*time.Second); !isTimeout(err) {
			t.Fatalf("failure %d: %v, want a timeout", i+1, err)
		}
	}
	waitState(t, c, storefx.BreakerHalfOpen, 5*time.Second)
	gets := sent.count("get")
	began := time.Now()
	for i := 0; i < 100; i++ {
		if err := get(c, "k", time.Second); !errors.Is(err, storefx.ErrCircuitOpen) {
			t.Fatalf("GET %d while half-open: %v, want ErrCircuitOpen", i, err)
		}
	}
	took := time.Since(began)
	if n := sent.count("get") - gets; n != 0 {
		t.Fatalf("%d GETs sent while half-open, want 0", n)
	}
	if st := c.Breaker(); st.Probes != 1 || st.State != storefx.BreakerHalfOpen {
		t.Fatalf("one probe in flight expected: %+v", st)
	}
	t.Logf("100 refused GETs took %v", took)
	proxy.SetMode(faultproxy.Forward)
	waitState(t, c, storefx.BreakerClosed, 10*time.Second)
	if st := c.Breaker(); st.Probes != 1 || st.ProbeFailures != 0 {
		t.Fatalf("the hanging probe should have closed the breaker: %+v", st)
	}
	if err := get(c, "k", time.Second); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET after thaw: %v", err)
	}
}

func isTimeout(err error) bool {
	var to interface{ Timeout() bool }
	return errors.As(err, &to) && to.Timeout()
}

// Replies of a server are not failures: a missing key, a wrong type, a
// script error, and CLUSTERDOWN, LOADING or MASTERDOWN (they come at once),
// however many, leave the breaker closed.
func TestBreaker_ServerErrorsDoNotOpen(t *testing.T) {
	t.Parallel()
	srv := redistest.StartPrivate(t)
	c, _ := newBreakerClient(t, srv.Addr(), storefx.BreakerConfig{Failures: 2})
	ctx := context.Background()
	if err := c.LPush(ctx, "list", "x").Err(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		if err := c.Get(ctx, "missing").Err(); !errors.Is(err, redis.Nil) {
			t.Fatal(err)
		}
		if err := c.Get(ctx, "list").Err(); err == nil || !strings.HasPrefix(err.Error(), "WRONGTYPE") {
			t.Fatalf("GET of a list: %v", err)
		}
		if err := c.Eval(ctx, "return redis.error_reply('MINE')", nil).Err(); err == nil || !strings.Contains(err.Error(), "MINE") {
			t.Fatalf("script error: %v", err)
		}
	}
	// Replies that say the server cannot serve now, but come at once (more
	// of them in a row than Failures; go-redis retries each a few times).
	for _, reply := range []string{"CLUSTERDOWN The cluster is down", "LOADING Redis is loading", "MASTERDOWN Link is down"} {
		if err := c.Eval(ctx, "return redis.error_reply(ARGV[1])", nil, reply).Err(); err == nil || !strings.HasPrefix(err.Error(), reply[:7]) {
			t.Fatalf("%s reply: %v", reply, err)
		}
	}
	// A caller that gives up is no failure of Redis either.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	for i := 0; i < 5; i++ {
		_ = c.Get(cctx, "k").Err()
	}
	if st := c.Breaker(); st.State != storefx.BreakerClosed || st.Opened != 0 {
		t.Fatalf("breaker after server errors: %+v", st)
	}
}

// With the breaker disabled every command is sent, however many failed.
func TestBreaker_Disabled_EveryCommandSent(t *testing.T) {
	t.Parallel()
	srv := redistest.StartPrivate(t)
	c, _ := newBreakerClient(t, srv.Addr(), storefx.BreakerConfig{Disabled: true})
	srv.Kill()
	for i := 0; i < 10; i++ {
		if err := get(c, "k", 200*time.Millisecond); err == nil || errors.Is(err, storefx.ErrCircuitOpen) {
			t.Fatalf("GET %d: %v, want a network error", i, err)
		}
	}
	if st := c.Breaker(); st.State != storefx.BreakerClosed || st.Opened != 0 {
		t.Fatalf("disabled breaker: %+v", st)
	}
}

// A Cluster client has a breaker per node: a dead master's commands fail at
// once with ErrCircuitOpen, while the other masters' keys are served.
func TestBreaker_Cluster_DeadMasterDoesNotStopTheOthers(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-master cluster")
	}
	t.Parallel()
	cl := redistest.StartCluster(t, 3, 0)
	c, err := storefx.New("default", storefx.Config{Addrs: cl.Addrs(), DialTimeout: 200 * time.Millisecond,
		Breaker: storefx.BreakerConfig{Failures: 3, ProbeInterval: 50 * time.Millisecond, ProbeTimeout: 200 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cc, ok := c.Unwrap().(*redis.ClusterClient)
	if !ok {
		t.Fatalf("a %T", c.Unwrap())
	}
	ctx := context.Background()
	// One key per master.
	byMaster := map[string]string{}
	for i := 0; len(byMaster) < 3 && i < 1000; i++ {
		key := "k" + strconv.Itoa(i)
		m, err := cc.MasterForKey(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if _, seen := byMaster[m.Options().Addr]; !seen {
			byMaster[m.Options().Addr] = key
		}
		if err := c.Set(ctx, key, "v", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	victim := cl.Nodes[0].Addr()
	cl.Nodes[0].Kill()
	for i := 0; c.Breaker().Opened == 0; i++ {
		if i > 50 {
			t.Fatalf("no breaker opened after %d failed commands to the dead master: %+v", i, c.Breaker())
		}
		_ = get(c, byMaster[victim], 300*time.Millisecond)
	}
	if err := get(c, byMaster[victim], time.Second); !errors.Is(err, storefx.ErrCircuitOpen) {
		t.Fatalf("the dead master's key: %v, want ErrCircuitOpen", err)
	}
	for addr, key := range byMaster {
		if addr == victim {
			continue
		}
		for i := 0; i < 20; i++ {
			if v, err := c.Get(ctx, key).Result(); err != nil || v != "v" {
				t.Fatalf("key %s on the live master %s: %q, %v", key, addr, v, err)
			}
		}
	}
	if st := c.Breaker(); st.State == storefx.BreakerClosed || st.Refused == 0 {
		t.Fatalf("breaker stats %+v", st)
	}
}

// A breaker opened by a short stall of a working Redis closes after its
// first probe, sent as it opens, once Redis answers again.
func TestBreaker_OpenedByAStall_ClosesAfterOneProbe(t *testing.T) {
	t.Parallel()
	srv := redistest.StartPrivate(t)
	const probe = 1500 * time.Millisecond
	c, _ := newBreakerClient(t, srv.Addr(), storefx.BreakerConfig{Failures: 1, ProbeInterval: time.Hour, ProbeTimeout: probe})
	if err := get(c, "k", time.Second); !errors.Is(err, redis.Nil) {
		t.Fatal(err)
	}
	// The GET waits probe (a failure), then the probe waits at most probe:
	// Redis wakes in between.
	srv.Sleep(probe + time.Second)
	if err := get(c, "k", probe); !errors.Is(err, context.DeadlineExceeded) && !isTimeout(err) {
		t.Fatalf("GET on a stalled Redis: %v, want a timeout", err)
	}
	if st := c.Breaker(); st.Opened != 1 {
		t.Fatalf("%+v, want opened once", st)
	}
	// ProbeInterval is an hour: only the probe sent as it opened can close it.
	waitState(t, c, storefx.BreakerClosed, 10*time.Second)
	if st := c.Breaker(); st.Probes != 1 || st.ProbeFailures != 0 {
		t.Fatalf("%+v, want one successful probe", st)
	}
}

// probeGauge is an Instrumentation inside the breaker that tracks the most
// breaker probes (PINGs the test did not send) in flight at once, and
// holds each until its timeout: a probe that hangs, for certain, whatever
// connection it would have taken.
type probeGauge struct {
	inflight, most atomic.Int32
}

type sentByTest struct{}

func (g *probeGauge) instrumentation(storefx.ClientInfo) redis.Hook { return g }
func (g *probeGauge) DialHook(next redis.DialHook) redis.DialHook   { return next }
func (g *probeGauge) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (g *probeGauge) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() != "ping" || ctx.Value(sentByTest{}) != nil {
			return next(ctx, cmd)
		}
		n := g.inflight.Add(1)
		defer g.inflight.Add(-1)
		for m := g.most.Load(); n > m && !g.most.CompareAndSwap(m, n); m = g.most.Load() {
		}
		<-ctx.Done()
		cmd.SetErr(ctx.Err())
		return ctx.Err()
	}
}

// A breaker closed (by a command that passes it) while its probe hangs, and
// opened again, sent a second probe beside the first: when the first
// failed, two probe chains ran side by side. Probes go one at a time: the
// one in flight decides, and the breaker reads half-open meanwhile.
func TestBreaker_ReopenedWhileAProbeHangs_ProbesStayOneAtATime(t *testing.T) {
	t.Parallel()
	srv := redistest.StartPrivate(t)
	proxy := faultproxy.Start(t, srv.Addr())
	g := &probeGauge{}
	c, err := storefx.New("default", storefx.Config{URL: "redis://" + proxy.Addr(), DialTimeout: 200 * time.Millisecond, ReadTimeout: 100 * time.Millisecond,
		Breaker: storefx.BreakerConfig{Failures: 1, ProbeInterval: 50 * time.Millisecond, ProbeTimeout: 5 * time.Second}}, g.instrumentation)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		proxy.SetMode(faultproxy.Forward)
		_ = c.Close()
	}()
	// A GET times out on a frozen connection: the breaker opens, and its
	// probe hangs. (Frozen connections made it hang only if it took one,
	// which was left to the pool and to timing: in 1 run of 40 on a loaded
	// machine it got a working one and closed the breaker; the gauge holds
	// it instead.)
	proxy.SetMode(faultproxy.Freeze)
	if err := get(c, "k", 5*time.Second); err == nil {
		t.Fatal("GET on a frozen connection succeeded")
	}
	waitState(t, c, storefx.BreakerHalfOpen, time.Second)
	// Redis answers again: a command that passes the breaker closes it
	// while the first probe still hangs.
	proxy.SetMode(faultproxy.Forward)
	ctx := storefx.BypassBreaker(context.WithValue(context.Background(), sentByTest{}, true))
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	waitState(t, c, storefx.BreakerClosed, time.Second)
	// Everything freezes again; a GET fails and the breaker opens again.
	proxy.SetMode(faultproxy.Freeze)
	if err := get(c, "k", 5*time.Second); err == nil {
		t.Fatal("GET on a frozen connection succeeded")
	}
	if st := c.Breaker(); st.State != storefx.BreakerHalfOpen || st.Opened != 2 {
		t.Fatalf("reopened while a probe is in flight: %+v, want half-open, opened twice", st)
	}
	// The first probe times out: the next (one) goes out after it.
	deadline := time.Now().Add(10 * time.Second)
	for st := c.Breaker(); st.ProbeFailures < 1 || st.Probes < 2; st = c.Breaker() {
		if time.Now().After(deadline) {
			t.Fatalf("no second probe after the first failed: %+v", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if m := g.most.Load(); m != 1 {
		t.Fatalf("%d probes were in flight at once, want one at a time (%+v)", m, c.Breaker())
	}
}

// Found by an adversary (helper-73): go-redis sends the handshake of every
// new connection (HELLO, CLIENT SETINFO) inside the command that needed the
// connection, through the client's hooks. The breaker counted it: with
// writes paused (CLIENT PAUSE WRITE: PING and HELLO answer, writes wait),
// each timed-out write's replacement connection said HELLO successfully,
// which reset the count, and the breaker never opened; with Redis frozen,
// the HELLO timeouts counted as failures of their own, and it opened after
// 3 of the caller's commands. Each of the caller's commands counts once.
func TestBreaker_CountsTheCallersCommandsNotHandshakes(t *testing.T) {
	const timeout = 200 * time.Millisecond
	expectOpenedAfterFive := func(t *testing.T, c *storefx.Client, command func(i int) error) {
		t.Helper()
		for i := 1; i <= storefx.DefaultBreakerFailures; i++ {
			if err := command(i); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("command %d: %v, want its deadline exceeded", i, err)
			}
			opened := c.Breaker().Opened
			if i < storefx.DefaultBreakerFailures && opened != 0 {
				t.Fatalf("the breaker opened after %d failed commands, not %d", i, storefx.DefaultBreakerFailures)
			}
			if i == storefx.DefaultBreakerFailures && opened != 1 {
				t.Fatalf("the breaker did not open after %d failed commands: %+v", i, c.Breaker())
			}
		}
	}
	t.Run("writes paused", func(t *testing.T) {
		srv := redistest.StartPrivate(t)
		c, sent := newBreakerClient(t, srv.Addr(), storefx.BreakerConfig{ProbeTimeout: 50 * time.Millisecond})
		ctx := context.Background()
		if err := c.Set(ctx, "k", "v", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		admin := srv.Client()
		if err := admin.Do(ctx, "CLIENT", "PAUSE", 20000, "WRITE").Err(); err != nil {
			t.Fatal(err)
		}
		defer admin.Do(ctx, "CLIENT", "UNPAUSE")
		expectOpenedAfterFive(t, c, func(i int) error {
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			return c.Set(ctx, "paused-"+strconv.Itoa(i), "v", time.Minute).Err()
		})
		if sent.count("hello") < 2 {
			t.Fatalf("%d HELLOs: the timed-out writes' connections were not replaced, the case is not tested", sent.count("hello"))
		}
	})
	// helper-74: taking every CLIENT command for a handshake let the
	// application's own CLIENT ID through an open breaker, uncounted.
	t.Run("the application's CLIENT commands", func(t *testing.T) {
		srv := redistest.StartPrivate(t)
		c, _ := newBreakerClient(t, srv.Addr(), storefx.BreakerConfig{ProbeTimeout: 50 * time.Millisecond})
		if err := c.ClientID(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
		srv.Sleep(20 * time.Second) // killed at the test's end
		expectOpenedAfterFive(t, c, func(int) error {
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			return c.ClientID(ctx).Err()
		})
		ctx := context.Background()
		for name, command := range map[string]func() error{
			"CLIENT ID": func() error { return c.ClientID(ctx).Err() },
			"SELECT":    func() error { return c.Do(ctx, "SELECT", 0).Err() },
			"HELLO":     func() error { return c.Do(ctx, "HELLO", 3).Err() },
			"pipeline of CLIENT GETNAME": func() error {
				_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error { p.ClientGetName(ctx); return nil })
				return err
			},
		} {
			if err := command(); !errors.Is(err, storefx.ErrCircuitOpen) {
				t.Errorf("%s with the breaker open: %v, want ErrCircuitOpen", name, err)
			}
		}
	})
	t.Run("Redis frozen", func(t *testing.T) {
		srv := redistest.StartPrivate(t)
		c, sent := newBreakerClient(t, srv.Addr(), storefx.BreakerConfig{ProbeTimeout: 50 * time.Millisecond})
		if err := get(c, "k", time.Second); !errors.Is(err, redis.Nil) {
			t.Fatal(err)
		}
		srv.Sleep(20 * time.Second) // killed at the test's end
		expectOpenedAfterFive(t, c, func(int) error { return get(c, "k", timeout) })
		if sent.count("hello") < 2 {
			t.Fatalf("%d HELLOs: the timed-out commands' connections were not replaced, the case is not tested", sent.count("hello"))
		}
	})
}
