package storefx

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisfx/redisfx/internal/fxconfig"
	"github.com/redisfx/redisfx/internal/handshake"
	"github.com/redisfx/redisfx/plugintrace"
)

// ErrCircuitOpen is the error of a command that a client's circuit breaker
// refused without sending it: the client's last commands failed (Redis
// down, frozen, unreachable) and no background probe has reached it since.
// Every user of the client sees it as it sees any other store error, at
// once instead of after a timeout: idempotencyfx applies its ErrorPolicy,
// ratelimitfx its FailOpen, cachefx serves from the loader.
var ErrCircuitOpen = errors.New("storefx: circuit open: Redis failed recently and is not called until a probe reaches it")

// Defaults of BreakerConfig.
const (
	DefaultBreakerFailures      = 5
	DefaultBreakerProbeInterval = 250 * time.Millisecond
	DefaultBreakerProbeTimeout  = 500 * time.Millisecond
)

// BreakerConfig configures the circuit breaker every client of storefx has.
// The zero value is the default breaker: it opens after 5 consecutive
// failed commands and probes Redis with a PING at once, then every 250ms
// (each bounded by 500ms), until one answers.
//
// A failure is an error that made the caller wait for a Redis it could not
// use: a network error, a timeout (the caller's deadline included) or a
// pool timeout. Every reply of a server — redis.Nil, a script's error,
// WRONGTYPE, NOSCRIPT, and also LOADING, MASTERDOWN or CLUSTERDOWN, which
// come back at once and which a PING would not see — and a cancelled
// context are not failures; they and every success reset the count. The
// count is of the caller's commands: the handshake go-redis sends through
// the client's hooks, inside the command that needed a new connection
// (HELLO or AUTH, a pipeline of SELECT, READONLY and CLIENT SETNAME /
// TRACKING, CLIENT SETINFO), neither counts nor resets it, and neither do
// those commands when the application sends them itself. (Counted, a frozen
// Redis's HELLO timeouts opened the breaker after 3 of the caller's commands
// instead of 5, and under CLIENT PAUSE WRITE, where PING and HELLO answer
// but writes wait, each timed-out write's new connection said HELLO
// successfully and reset the count: the breaker never opened.) Like every
// command, they are refused while the breaker is open. A Cluster node's
// breaker counts every command sent to its node, go-redis's retries of a
// Cluster command included, so it may open after fewer commands of the
// caller.
//
// While the breaker is open every command and pipeline of the client fails
// with ErrCircuitOpen without being sent (no command span is made for it).
// Probes run in the background, one at a time, so no request is spent on
// finding out whether Redis is back; the first PING that answers closes the
// breaker, and so does a successful background health check (Watch). A
// Cluster client has a breaker per node: when one master of several dies,
// only the commands to it fail at once, until the slot map names its
// replacement (Config.ClusterStateReloadInterval).
type BreakerConfig struct {
	// Disabled turns the breaker off: every command is sent to Redis and
	// waits for its timeout however often the previous ones failed.
	Disabled bool
	// Failures is the number of consecutive failed commands that opens the
	// breaker. Default 5.
	Failures int
	// ProbeInterval is the time between background probes while the breaker
	// is open; the first goes out as it opens, so a breaker opened by
	// timeouts of a busy process rather than a dead Redis closes within a
	// round trip. Default 250ms.
	ProbeInterval time.Duration
	// ProbeTimeout bounds each probe's PING. Default 500ms.
	ProbeTimeout time.Duration
}

func (c BreakerConfig) validate() error {
	switch {
	case c.Failures < 0:
		return fieldErr("Config.Breaker.Failures", "%d is negative", c.Failures)
	case c.ProbeInterval < 0:
		return fieldErr("Config.Breaker.ProbeInterval", "%v is negative", c.ProbeInterval)
	case c.ProbeTimeout < 0:
		return fieldErr("Config.Breaker.ProbeTimeout", "%v is negative", c.ProbeTimeout)
	case fxconfig.TooLong(c.ProbeInterval) != "":
		return fieldErr("Config.Breaker.ProbeInterval", "%s", fxconfig.TooLong(c.ProbeInterval))
	case fxconfig.TooLong(c.ProbeTimeout) != "":
		return fieldErr("Config.Breaker.ProbeTimeout", "%s", fxconfig.TooLong(c.ProbeTimeout))
	}
	return nil
}

func (c BreakerConfig) withDefaults() BreakerConfig {
	if c.Failures == 0 {
		c.Failures = DefaultBreakerFailures
	}
	if c.ProbeInterval == 0 {
		c.ProbeInterval = DefaultBreakerProbeInterval
	}
	if c.ProbeTimeout == 0 {
		c.ProbeTimeout = DefaultBreakerProbeTimeout
	}
	return c
}

// BreakerState is the state of a client's circuit breaker.
type BreakerState int32

// States of a breaker: closed (commands are sent), open (commands are
// refused; a probe is due), half-open (commands are refused while a probe
// is in flight).
const (
	BreakerClosed BreakerState = iota
	BreakerOpen
	BreakerHalfOpen
)

// String returns "closed", "open" or "half-open".
func (s BreakerState) String() string {
	switch s {
	case BreakerClosed:
		return "closed"
	case BreakerOpen:
		return "open"
	case BreakerHalfOpen:
		return "half-open"
	}
	return "unknown"
}

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

// probeKey marks the context of a command that is sent whatever the
// breaker's state, and whose outcome closes or keeps open the breaker: the
// breaker's own probes and the background health check.
type probeKey struct{}

func withProbe(ctx context.Context) context.Context { return context.WithValue(ctx, probeKey{}, true) }

// BypassBreaker returns ctx marked so that the commands made with it are
// sent even while the client's circuit breaker is open: one that succeeds
// closes the breaker, one that fails is not counted. It is for the few
// commands that must reach Redis as soon as it answers again and that are
// bounded by their own timeout: lockfx's renewals of held locks and
// idempotencyfx's lease renewals and completions of records it claimed. A
// breaker that opened during a short stall would otherwise refuse them
// until its next probe, and a lock or lease could run out although Redis
// answers.
func BypassBreaker(ctx context.Context) context.Context { return withProbe(ctx) }

// breaker is the circuit breaker of one client, a go-redis hook.
type breaker struct {
	cfg    BreakerConfig
	client redis.UniversalClient       // the client (a Cluster node's) it guards
	ping   func(context.Context) error // a PING through the hooks (marked as a probe)

	state    atomic.Int32 // BreakerState
	failures atomic.Int32 // consecutive failures while closed

	opened, refused, probes, probeFailures atomic.Int64
	retired                                atomic.Bool // its client was closed (a Cluster node let go)

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

// isFailure says whether err shows that Redis could not be used.
func isFailure(err error) bool {
	if err == nil || errors.Is(err, ErrCircuitOpen) || errors.Is(err, context.Canceled) || errors.Is(err, redis.ErrClosed) {
		return false
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		// A reply, even LOADING or CLUSTERDOWN, came at once: nothing to
		// save by not sending, and a PING would close the breaker at once
		// (during a Cluster failover every master answers CLUSTERDOWN, and
		// counting it made the breakers open and close dozens of times).
		return false
	}
	return true // refused dials, resets, timeouts, a full pool
}

// allow reports whether a command with ctx may be sent.
func (b *breaker) allow(ctx context.Context) bool {
	if BreakerState(b.state.Load()) == BreakerClosed {
		return true
	}
	if ctx.Value(probeKey{}) != nil {
		return true
	}
	b.refused.Add(1)
	return false
}

// record notes the outcome of a command that was sent.
func (b *breaker) record(ctx context.Context, err error) {
	if ctx.Value(probeKey{}) != nil {
		if isFailure(err) {
			return // the probe's caller decides
		}
		b.close()
		return
	}
	if !isFailure(err) {
		if b.failures.Load() != 0 {
			b.failures.Store(0)
		}
		return
	}
	if b.failures.Add(1) >= int32(b.cfg.Failures) && BreakerState(b.state.Load()) == BreakerClosed {
		b.open()
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
		// decides, and its failure schedules the next; probes go one at a
		// time.
		b.state.Store(int32(BreakerHalfOpen))
		return
	}
	// The first probe goes out at once: a breaker opened by a burst of
	// timeouts of a busy process, not by a dead Redis, closes within one
	// round trip.
	b.scheduleLocked(0)
}

// close closes the breaker (a probe or a health check reached Redis).
func (b *breaker) close() {
	if BreakerState(b.state.Load()) == BreakerClosed {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closeLocked()
}

func (b *breaker) closeLocked() {
	b.failures.Store(0)
	b.state.Store(int32(BreakerClosed))
	if b.timer != nil {
		b.timer.Stop()
		b.timer = nil
	}
}

func (b *breaker) scheduleLocked(after time.Duration) {
	b.timer = time.AfterFunc(after, b.probe)
}

// probe sends one PING while the breaker is open.
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
	if err == nil {
		// Closed under the same lock that ends the probe: a breaker opened
		// in between would wait for this probe, which schedules no other.
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
		b.scheduleLocked(b.cfg.ProbeInterval)
	}
}

// shutdownProbes ends probing without waiting for a probe in flight, whose
// context it cancels.
func (b *breaker) shutdownProbes() {
	b.stop()
	b.mu.Lock()
	b.shutdown = true
	if b.timer != nil {
		b.timer.Stop()
		b.timer = nil
	}
	b.mu.Unlock()
}

func (b *breaker) stats() BreakerStats {
	return BreakerStats{State: BreakerState(b.state.Load()), Opened: b.opened.Load(), Refused: b.refused.Load(),
		Probes: b.probes.Load(), ProbeFailures: b.probeFailures.Load()}
}

// DialHook implements redis.Hook. A dial ends when the client is closed:
// go-redis dials for a pool in a goroutine of its own, which goes on after
// the command or probe that wanted the connection has given up (to hand
// it to the next one), and closing the pool does not stop it: up to five
// tries of DialTimeout each, 25 s by default, against a Redis that drops
// SYNs, logging warnings long after the application stopped (found by an
// adversary). Each try now fails at once after Close.
func (b *breaker) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if b.stopping.Err() != nil {
			return nil, redis.ErrClosed
		}
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		defer context.AfterFunc(b.stopping, cancel)()
		return next(ctx, network, addr)
	}
}

// ProcessHook implements redis.Hook.
func (b *breaker) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !b.allow(ctx) {
			cmd.SetErr(ErrCircuitOpen)
			return ErrCircuitOpen
		}
		err := next(ctx, cmd)
		if !handshake.Command(cmd.Name(), cmd.Args()) {
			b.record(ctx, err)
		}
		return err
	}
}

// ProcessPipelineHook implements redis.Hook.
func (b *breaker) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if !b.allow(ctx) {
			for _, cmd := range cmds {
				cmd.SetErr(ErrCircuitOpen)
			}
			return ErrCircuitOpen
		}
		err := next(ctx, cmds)
		if !handshake.Pipeline(cmds) {
			b.record(ctx, err)
		}
		return err
	}
}

// probePing is a PING that passes the breaker and makes no command span.
func probePing(c redis.UniversalClient) func(context.Context) error {
	return func(ctx context.Context) error {
		return c.Ping(withProbe(plugintrace.WithoutCommandSpans(ctx))).Err()
	}
}

// breakerSet is the breakers of one Client: one for a standalone or
// Sentinel client, one per node of a Cluster client.
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

// add gives c a breaker of its own, as its first hook.
func (s *breakerSet) add(c redis.UniversalClient) {
	if s == nil {
		return
	}
	b := newBreaker(s.cfg)
	b.client, b.ping = c, probePing(c)
	c.AddHook(b)
	s.mu.Lock()
	s.all = append(s.all, b)
	s.mu.Unlock()
}

// stats sums the breakers' counts; the state is the worst of them.
func (s *breakerSet) stats() BreakerStats {
	var out BreakerStats
	if s == nil {
		return out
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, b := range s.all {
		st := b.stats()
		if !b.retired.Load() {
			out.State = max(out.State, st.State)
		}
		out.Opened += st.Opened
		out.Refused += st.Refused
		out.Probes += st.Probes
		out.ProbeFailures += st.ProbeFailures
	}
	return out
}

// forgetNodesOutside closes the breakers of Cluster nodes that no longer
// serve a slot (a failed master after its replica took over): no command
// is routed to them, and go-redis lets them go only a minute later, until
// when their open breaker would show the client open and probe a dead
// address every ProbeInterval. Should such a node serve again and still
// fail, its breaker opens again after Failures commands.
func (s *breakerSet) forgetNodesOutside(serving map[*redis.Client]bool) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, b := range s.all {
		if node, ok := b.client.(*redis.Client); ok && !serving[node] {
			b.close()
		}
	}
}

// each calls f with every breaker of the set.
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
// most open one; the health check (Registry.Watch, which Module runs)
// closes the breaker of a node that no longer serves a slot, such as a
// failed master whose replica took over. State is BreakerClosed when the
// breaker is disabled.
func (c *Client) Breaker() BreakerStats { return c.breakers.stats() }

// Close ends the breaker's probing and closes the client. It does not wait
// for Redis: a probe in flight fails at once, whether it is dialling (its
// context is cancelled) or waiting for an answer (the client's connections
// are closed: a cancelled context does not cut a PING short). A dial that
// go-redis goes on with in the background, for a caller that gave up, has
// each of its tries fail at once; go-redis still pauses 100 ms between its
// five tries and then logs that the dial failed, so such a goroutine may
// outlive Close by about half a second. Two exceptions: with TLS (rediss://)
// go-redis's dial does not take a context, so a try already connecting runs
// to DialTimeout; and without the circuit breaker (Config.Breaker.Disabled)
// every try runs to DialTimeout.
func (c *Client) Close() error {
	c.breakers.each((*breaker).shutdownProbes)
	err := c.UniversalClient.Close()
	c.breakers.each(func(b *breaker) { b.inflight.Wait() })
	return err
}
