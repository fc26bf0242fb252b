package storefx

import (
	"cmp"
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisfx/redisfx/internal/handshake"
	"github.com/redisfx/redisfx/plugintrace"
)

// ErrCircuitOpen is the error of a command that a client's circuit breaker
// refused before any try of it was sent: Redis cannot run it. (A Cluster
// retry refused after a try was sent fails with another error: it may run.)
var ErrCircuitOpen = errors.New("storefx: circuit open: Redis failed recently and is not called until a probe reaches it")

// Defaults of BreakerConfig.
const (
	DefaultBreakerFailures      = 5
	DefaultBreakerProbeInterval = 250 * time.Millisecond
	DefaultBreakerProbeTimeout  = 500 * time.Millisecond
)

// BreakerConfig configures the circuit breaker of every storefx client (one
// per node of a Cluster client): after Failures consecutive failures of
// Redis, commands fail at once with ErrCircuitOpen until a background PING
// answers. Only evidence about Redis counts (a refused dial, a reset, a
// timeout), never an answer; docs/reliability.md describes it in full.
type BreakerConfig struct {
	// Disabled turns the breaker off: every command is sent to Redis and
	// waits for its timeout however often the previous ones failed.
	Disabled bool
	// Failures is the number of consecutive failed commands that opens the
	// breaker. Default 5.
	Failures int
	// ProbeInterval is the time between background probes while the breaker
	// is open; the first goes out as it opens, so a breaker opened by a
	// short stall closes within a round trip of its end. Default 250ms.
	ProbeInterval time.Duration
	// ProbeTimeout bounds each probe's PING; a command cut short by its
	// caller's deadline counts as a failure only after waiting this long.
	// Default 500ms.
	ProbeTimeout time.Duration
}

func (c BreakerConfig) withDefaults() BreakerConfig {
	c.Failures = cmp.Or(c.Failures, DefaultBreakerFailures)
	c.ProbeInterval = cmp.Or(c.ProbeInterval, DefaultBreakerProbeInterval)
	c.ProbeTimeout = cmp.Or(c.ProbeTimeout, DefaultBreakerProbeTimeout)
	return c
}

// BreakerState is the state of a client's circuit breaker.
type BreakerState int32

// States of a breaker: closed (commands are sent), open (refused; a probe
// is due), half-open (refused while a probe is in flight).
const (
	BreakerClosed BreakerState = iota
	BreakerOpen
	BreakerHalfOpen
)

// String returns "closed", "open" or "half-open".
func (s BreakerState) String() string {
	if s < 0 || int(s) >= len(stateNames) {
		return "unknown"
	}
	return stateNames[s]
}

var stateNames = [...]string{"closed", "open", "half-open"}

// BreakerStats counts what a client's breaker did since the client was built.
type BreakerStats struct {
	State BreakerState
	// Opened counts the times the breaker opened.
	Opened int64
	// Refused counts the commands and pipelines refused while it was open.
	Refused int64
	// Probes counts the background probes sent, and ProbeFailures those
	// that did not reach Redis.
	Probes, ProbeFailures int64
}

// probeKey marks a context made by BypassBreaker (also used by the
// breaker's probes, the health check and the start-up PINGs).
type probeKey struct{}

// BypassBreaker returns ctx marked so that the commands made with it are
// sent even while the client's circuit breaker is open: one that succeeds
// (Redis answers, an error reply included) closes the breaker, one that
// fails is not counted. It is for renewals and completions that must reach
// Redis as soon as it answers again.
func BypassBreaker(ctx context.Context) context.Context {
	return context.WithValue(ctx, probeKey{}, true)
}

// errSentThenRefused is the error of a Cluster command whose earlier try
// was sent and whose retry the breaker refused.
var errSentThenRefused = errors.New("storefx: circuit open on a retry of a command already sent: Redis may still run it")

// call is one call of a Cluster client: whether a node breaker let one of
// go-redis's tries of it through.
type call struct{ sent atomic.Bool }

type callKey struct{}

// callHook, a Cluster client's outermost hook, gives each call a *call.
type callHook struct{}

// DialHook implements redis.Hook.
func (callHook) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements redis.Hook.
func (callHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		return next(context.WithValue(ctx, callKey{}, new(call)), cmd)
	}
}

// ProcessPipelineHook implements redis.Hook.
func (callHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		return next(context.WithValue(ctx, callKey{}, new(call)), cmds)
	}
}

// breaker is the circuit breaker of one client, a go-redis hook.
type breaker struct {
	cfg    BreakerConfig
	client *redis.Client               // the client (a Cluster node's) it guards
	ping   func(context.Context) error // a PING through the hooks (marked as a probe)

	state    atomic.Int32 // BreakerState
	failures atomic.Int32 // consecutive failures while closed

	opened, refused, probes, probeFailures atomic.Int64
	retired                                atomic.Bool // its client was closed (a Cluster node let go)
	left                                   atomic.Bool // a Cluster node out of the slot map: nothing counts

	mu       sync.Mutex
	timer    *time.Timer // the next probe, while open
	probing  bool        // a probe is in flight: the only one
	shutdown bool
	// stopping ends a probe in flight at Close, a dial included (closing
	// the client ends only the connections it already has).
	stopping context.Context
	stop     context.CancelFunc
	inflight sync.WaitGroup
}

func newBreaker(cfg BreakerConfig) *breaker {
	b := &breaker{cfg: cfg.withDefaults()}
	b.stopping, b.stop = context.WithCancel(context.Background())
	return b
}

// verdict is what the outcome of a command shows of Redis.
type verdict int8

const (
	unknown verdict = iota
	answered
	failed
)

func isAnswer(err error) bool {
	if err == nil {
		return true // before the declaration below, which allocates
	}
	var reply redis.Error
	return errors.As(err, &reply)
}

// judge says what err, ending a command sent with ctx at began, shows of
// Redis (see BreakerConfig).
func (b *breaker) judge(ctx context.Context, err error, began time.Time) verdict {
	switch {
	case isAnswer(err): // even LOADING or CLUSTERDOWN: a PING would close the breaker at once
		return answered
	case errors.Is(err, redis.ErrClosed), errors.Is(err, redis.ErrPoolTimeout):
		return unknown // not sent
	}
	// The read deadline go-redis sets from ctx fires before ctx's own timer.
	now := time.Now()
	deadline, ok := ctx.Deadline()
	switch {
	case ctx.Err() == nil && (!ok || now.Before(deadline)):
		return failed // refused dials, resets, the client's own timeouts
	case errors.Is(ctx.Err(), context.Canceled):
		return unknown
	case now.Sub(began) >= b.cfg.ProbeTimeout:
		return failed // unanswered, or not connected, for as long as a probe waits
	}
	return unknown // the caller's deadline ended it sooner
}

func (b *breaker) record(ctx context.Context, v verdict) {
	switch {
	case b.left.Load(): // go-redis still dials it, and reloads the slot map from it
	case ctx.Value(probeKey{}) != nil:
		if v == answered { // a failure is for the probe's caller to judge
			b.close()
		}
	case v == answered:
		if b.failures.Load() != 0 {
			b.failures.Store(0)
		}
	case v == failed:
		if b.failures.Add(1) >= int32(b.cfg.Failures) && BreakerState(b.state.Load()) == BreakerClosed {
			b.open()
		}
	}
}

func (b *breaker) open() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.shutdown || !b.state.CompareAndSwap(int32(BreakerClosed), int32(BreakerOpen)) {
		return
	}
	b.opened.Add(1)
	if b.probing {
		// A probe sent before the breaker last closed is still out: it
		// decides, and its failure schedules the next.
		b.state.Store(int32(BreakerHalfOpen))
		return
	}
	b.timer = time.AfterFunc(0, b.probe)
}

// close closes the breaker (Redis answered a probe or a bypassing command).
func (b *breaker) close() {
	if BreakerState(b.state.Load()) != BreakerClosed {
		b.mu.Lock()
		defer b.mu.Unlock()
		b.closeLocked()
	}
}

func (b *breaker) closeLocked() {
	b.failures.Store(0)
	b.state.Store(int32(BreakerClosed))
	b.stopTimerLocked()
}

func (b *breaker) stopTimerLocked() {
	if b.timer != nil {
		b.timer.Stop()
	}
}

func (b *breaker) probe() {
	b.mu.Lock()
	if b.shutdown || b.probing || !b.state.CompareAndSwap(int32(BreakerOpen), int32(BreakerHalfOpen)) {
		b.mu.Unlock()
		return
	}
	b.probing = true
	b.inflight.Add(1)
	b.mu.Unlock()
	defer b.inflight.Done()

	b.probes.Add(1)
	ctx, cancel := context.WithTimeout(b.stopping, b.cfg.ProbeTimeout)
	err := b.ping(ctx)
	cancel()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.probing = false
	if isAnswer(err) {
		// Closed under the lock that ends the probe: a breaker opened in
		// between waits for this probe, which schedules no other.
		b.closeLocked()
		return
	}
	b.probeFailures.Add(1)
	if errors.Is(err, redis.ErrClosed) { // a Cluster node the client let go
		b.shutdown = true
		b.retired.Store(true)
		return
	}
	if !b.shutdown && b.state.CompareAndSwap(int32(BreakerHalfOpen), int32(BreakerOpen)) {
		b.timer = time.AfterFunc(b.cfg.ProbeInterval, b.probe)
	}
}

// shutdownProbes ends probing; a probe in flight has its context cancelled.
func (b *breaker) shutdownProbes() {
	b.stop()
	b.mu.Lock()
	b.shutdown = true
	b.stopTimerLocked()
	b.mu.Unlock()
}

// DialHook implements redis.Hook. A failed dial counts as a failed command
// (go-redis dials in a goroutine of its own: a caller whose deadline ends
// first sees only its deadline); every dial ends when the client is closed.
func (b *breaker) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if b.stopping.Err() != nil {
			return nil, redis.ErrClosed
		}
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		defer context.AfterFunc(b.stopping, cancel)()
		began := time.Now()
		conn, err := next(ctx, network, addr)
		if err != nil {
			b.record(ctx, b.judge(ctx, err, began))
		}
		return conn, err
	}
}

// ProcessHook implements redis.Hook.
func (b *breaker) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		return b.guard(ctx, []redis.Cmder{cmd}, handshake.Command(cmd.Name(), cmd.Args()), func() error { return next(ctx, cmd) })
	}
}

// ProcessPipelineHook implements redis.Hook.
func (b *breaker) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		return b.guard(ctx, cmds, handshake.Pipeline(cmds), func() error { return next(ctx, cmds) })
	}
}

func (b *breaker) guard(ctx context.Context, cmds []redis.Cmder, handshake bool, send func() error) error {
	c, _ := ctx.Value(callKey{}).(*call)
	// A closed client's commands get go-redis's ErrClosed.
	if BreakerState(b.state.Load()) != BreakerClosed && ctx.Value(probeKey{}) == nil && b.stopping.Err() == nil {
		b.refused.Add(1)
		err := ErrCircuitOpen
		if c != nil && c.sent.Load() {
			err = errSentThenRefused
		}
		for _, cmd := range cmds {
			cmd.SetErr(err)
		}
		return err
	}
	if c != nil {
		c.sent.Store(true)
	}
	began := time.Now()
	err := send()
	if !handshake {
		b.record(ctx, b.judge(ctx, err, began))
	}
	return err
}

// breakerSet is the breakers of one Client (one per Cluster node).
type breakerSet struct {
	cfg BreakerConfig
	mu  sync.Mutex
	all []*breaker
}

func newBreakerSet(cfg BreakerConfig) *breakerSet {
	if cfg.Disabled {
		return nil
	}
	return &breakerSet{cfg: cfg}
}

// add gives c a breaker of its own, as its first hook (so a refused
// command makes no span).
func (s *breakerSet) add(c *redis.Client) {
	if s == nil {
		return
	}
	b := newBreaker(s.cfg)
	b.client = c
	b.ping = func(ctx context.Context) error { // passes the breaker, makes no span
		return c.Ping(BypassBreaker(plugintrace.WithoutCommandSpans(ctx))).Err()
	}
	c.AddHook(b)
	s.mu.Lock()
	s.all = append(s.all, b)
	s.mu.Unlock()
}

// stats sums the breakers' counts; the state is the worst of them.
func (s *breakerSet) stats() BreakerStats {
	var out BreakerStats
	s.each(func(b *breaker) {
		if !b.retired.Load() {
			out.State = max(out.State, BreakerState(b.state.Load()))
		}
		out.Opened += b.opened.Load()
		out.Refused += b.refused.Load()
		out.Probes += b.probes.Load()
		out.ProbeFailures += b.probeFailures.Load()
	})
	return out
}

// forgetLeftNodes closes, and stops counting for, the breakers of the
// Cluster nodes that serve no slot (a failed master after its replica took
// over): go-redis lets them go only a minute later, and their open breaker
// would show the client open and probe a dead address meanwhile. Listing
// the nodes sends nothing unless the slot map must be loaded.
func (s *breakerSet) forgetLeftNodes(ctx context.Context, cc *redis.ClusterClient) {
	var mu sync.Mutex
	serving := map[*redis.Client]bool{}
	if s == nil || cc.ForEachShard(ctx, func(_ context.Context, node *redis.Client) error {
		mu.Lock()
		serving[node] = true
		mu.Unlock()
		return nil
	}) != nil || len(serving) == 0 {
		return // no slot map: nothing says which nodes left
	}
	s.each(func(b *breaker) {
		b.left.Store(!serving[b.client])
		if !serving[b.client] {
			b.close()
		}
	})
}

func (s *breakerSet) each(f func(*breaker)) {
	if s == nil {
		return
	}
	s.mu.Lock()
	all := append([]*breaker(nil), s.all...)
	s.mu.Unlock()
	for _, b := range all {
		f(b)
	}
}

// Breaker returns what the client's circuit breaker did so far: for a
// Cluster client, the sum over its nodes' breakers, with the state of the
// most open one still serving a slot. State is BreakerClosed when the
// breaker is disabled.
func (c *Client) Breaker() BreakerStats { return c.breakers.stats() }

// Close ends the breaker's probing and closes the client without waiting
// for Redis: a probe or dial in flight fails at once (with TLS, or without
// the breaker, a dial already connecting runs to DialTimeout).
func (c *Client) Close() error {
	c.breakers.each((*breaker).shutdownProbes)
	err := c.UniversalClient.Close()
	c.breakers.each(func(b *breaker) { b.inflight.Wait() })
	return err
}
