package streamfx

// The streams checker: a randomized, fault-injecting test against a
// private redis-server, and a private 3-master Cluster, that states the
// consumers' promise as invariants and hunts for violations.
//
// A publisher adds messages to one stream; several consumers (each a
// Streams with a Redis client of its own, as separate processes would be)
// handle them in one group. Each message has a plan drawn from the seed:
// how many runs fail first (by error, panic or runtime.Goexit; some more than MaxAttempts,
// so they must end in the dead-letter stream), and how long each run
// takes: mostly short, some slower than ClaimIdle, some ignoring their
// context. Meanwhile faults hit the consumers and Redis: a consumer crash
// (its client closed at once, nothing acknowledged, its handlers end
// there), a graceful stop, a start of a new consumer (a new name, or the
// crashed one's), CLIENT KILL of every connection, CLIENT PAUSE (ALL or
// WRITE) shorter than ClaimIdle/4, SCRIPT FLUSH, and a restart of Redis
// that keeps its data (SAVE, kill, start on the same dump; on the Cluster,
// of the master that holds the stream, and the connection faults hit every
// master). Every run is
// recorded with the checker's clock; every dead-letter XADD with the time
// it was sent and answered. Then, once faults stop and every message is
// settled:
//
//  1. No message is handled by two handlers at once: no two runs of a
//     message overlap. Outside the promise, and so exempt: a run Stop
//     abandoned (its handler ignored the cancellation past the grace) and
//     a later run; a run during which Redis did not answer for longer than
//     ClaimIdle/4 (a slow restart), or the process or Redis stalled longer
//     than ClaimIdle/3 (measured by a probe, as on a loaded machine).
//  2. None is lost: afterwards the group has nothing pending and nothing
//     undelivered; every message not dead-lettered had a successful run.
//  3. None is dead-lettered while a handler is still succeeding on it: no
//     dead-letter XADD of a message lies within a run of it that succeeds
//     (exempt as in 1, and a dead-letter that settles the failure of a run
//     exempt from 1).
//  4. A stop costs no attempt: no message is dead-lettered by the consumer
//     whose last run of it the stop cancelled, and the run after a
//     cancelled one has the same Attempt. (Not judged when the give-back
//     failed, a restart or a lost read or claim reply came in between:
//     each may count a delivery the checker cannot see.)
//  5. Every stop returns within StopTimeout + 2×StoreTimeout (+1s of
//     scheduling slack), whatever its handlers do.
//  6. Nothing wedges: once the faults stop, a run starts or ends, or a
//     message is dead-lettered, at least every 10s until the group has
//     nothing pending or undelivered, whatever way the handlers left
//     (return, error, panic, runtime.Goexit, or ignoring their context).
//
// REDISFX_CHECK_DURATION sets how long each seed runs (default 3s; make
// chaos runs it longer); REDISFX_CHECK_SEED replays one seed. A failure
// prints the seed and the command that replays it. The schedule of
// operations and faults is the seed's; the timing of a real Redis and of
// the Go scheduler is not, so a replay re-creates the same storm, not the
// same interleaving.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	zapobserver "go.uber.org/zap/zaptest/observer"

	"github.com/redisfx/redisfx/internal/idemcheck"
	"github.com/redisfx/redisfx/internal/redistest"
)

// streamsCheckerSeeds are seeds that once failed; they run every time,
// before a fresh one.
var streamsCheckerSeeds = []uint64{
	1795895073969069630, // a handler's Goexit wedged its consumer (TestHandlerGoexit_IsAFailure_TheConsumerGoesOn)
}

func TestStreamsChecker(t *testing.T) {
	t.Parallel()
	duration := idemcheck.Duration(t, 3*time.Second)
	for _, mode := range []string{"standalone", "cluster"} {
		t.Run(mode, func(t *testing.T) {
			if mode == "cluster" && testing.Short() {
				t.Skip("-short: the Cluster variant is skipped")
			}
			for _, seed := range idemcheck.Seeds(t, streamsCheckerSeeds) {
				t.Run(fmt.Sprint(seed), func(t *testing.T) {
					w := newStreamsWorld(t, mode, seed)
					w.run(duration)
					violations := w.check()
					w.report(duration)
					if len(violations) > 0 {
						for _, v := range violations[:min(len(violations), 20)] {
							t.Error(v)
						}
						t.Errorf("%d violations; replay with:\n  REDISFX_CHECK_SEED=%d REDISFX_CHECK_DURATION=%v go test -race -count=1 -run '^TestStreamsChecker$/^%s$' -v ./streamfx",
							len(violations), seed, duration, mode)
					}
				})
			}
		})
	}
}

const checkSlots = 4 // consumers at most at once

// msgPlan is what the handler does with one message, drawn at publish.
type msgPlan struct {
	fails     int             // the first runs that fail
	exit      string          // how they fail: error, panic or goexit
	durations []time.Duration // per run (the last repeats)
	stubborn  []bool          // per run: ignores its context
}

// run is one handler run as the checker saw it.
type run struct {
	id, consumer string
	attempt      int
	start, end   time.Time
	outcome      string // ok, error, panic, goexit, stopped, crashed
	abandoned    time.Time
}

// dlqWrite is one dead-letter XADD as a consumer's client sent it.
type dlqWrite struct {
	id, consumer   string
	sent, returned time.Time
	err            error
}

// incarnation is one consumer process: a Streams with its own client.
type incarnation struct {
	name    string
	s       *Streams
	rdb     redis.UniversalClient
	crashed chan struct{}
	logs    *zapobserver.ObservedLogs
	mu      sync.Mutex
	active  map[*run]bool
}

type streamsWorld struct {
	t      *testing.T
	mode   string // standalone or cluster
	seed   uint64
	rng    *rand.Rand // the schedule's: used by the fault loop only
	nodes  []*redistest.Server
	admins []*redis.Client // one per node, for its faults
	admin  redis.UniversalClient
	pub    redis.UniversalClient
	stream string
	cfg    Config

	pubMu sync.Mutex // held by the publisher around each XADD, and by a restart

	mu             sync.Mutex
	plans          map[string]*msgPlan // by payload
	ids            map[string]string   // payload -> id, published for sure
	ambiguous      map[string]bool     // payloads whose XADD failed (may exist)
	runs           map[string][]*run   // by message id
	active         map[string]int      // by message id
	failsDone      map[string]int      // by payload: planned failures run
	dlq            []dlqWrite
	blind          [][2]time.Time // a consumer's read or claim failed: it may have delivered unseen
	outages        [][2]time.Time // Redis not answering longer than ClaimIdle/4
	stalls         [][2]time.Time // the process or Redis stalled longer than ClaimIdle/3 (watchStalls)
	restarts       []time.Time
	longestRestart time.Duration
	slots          [checkSlots]*incarnation
	all            []*incarnation
	stopTimes      []time.Duration
	lastActivity   time.Time // a run started or ended, or a dead-letter XADD returned
	handlers       sync.WaitGroup
	crashStops     sync.WaitGroup

	ops    map[string]int
	faults map[string]int
	errs   []string
}

func newStreamsWorld(t *testing.T, mode string, seed uint64) *streamsWorld {
	rng := rand.New(rand.NewPCG(seed, 0x57e4))
	w := &streamsWorld{t: t, mode: mode, seed: seed, rng: rng,
		plans: map[string]*msgPlan{}, ids: map[string]string{}, ambiguous: map[string]bool{}, runs: map[string][]*run{},
		active: map[string]int{}, failsDone: map[string]int{}, ops: map[string]int{}, faults: map[string]int{}}
	if mode == "cluster" {
		w.nodes = redistest.StartCluster(t, 3, 0).Nodes
	} else {
		w.nodes = []*redistest.Server{redistest.StartPrivate(t)}
	}
	for _, n := range w.nodes {
		w.admins = append(w.admins, n.Client())
	}
	w.admin = w.newClient(0, 0)
	w.pub = w.newClient(0, -1) // a retried XADD could add the message twice
	t.Cleanup(func() { _ = w.admin.Close(); _ = w.pub.Close() })
	w.stream = "chk"
	claimIdle := []time.Duration{300, 400, 600}[rng.IntN(3)] * time.Millisecond
	w.cfg = Config{
		MaxAttempts:  2 + rng.IntN(3),
		ClaimIdle:    claimIdle,
		Block:        100 * time.Millisecond,
		StopTimeout:  time.Duration(100+rng.IntN(500)) * time.Millisecond,
		StoreTimeout: 300 * time.Millisecond,
	}
	if err := w.admin.XGroupCreateMkStream(context.Background(), w.stream, "redisfx", "0").Err(); err != nil {
		t.Fatal(err)
	}
	return w
}

// newClient connects to the world's Redis (a Cluster client on the
// Cluster); retries -1 sends every command once.
func (w *streamsWorld) newClient(dialTimeout time.Duration, retries int) redis.UniversalClient {
	off := &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	if w.mode == "cluster" {
		addrs := make([]string, len(w.nodes))
		for i, n := range w.nodes {
			addrs[i] = n.Addr()
		}
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true, DialTimeout: dialTimeout,
			MaxRetries: retries, MaxRedirects: retries, MaintNotificationsConfig: off})
	}
	return redis.NewClient(&redis.Options{Addr: w.nodes[0].Addr(), ContextTimeoutEnabled: true, DialTimeout: dialTimeout,
		MaxRetries: retries, MaintNotificationsConfig: off})
}

// streamNode is the node that holds the stream (on the Cluster, its slot's
// master).
func (w *streamsWorld) streamNode() int {
	cc, ok := w.admin.(*redis.ClusterClient)
	if !ok {
		return 0
	}
	master, err := cc.MasterForKey(context.Background(), w.stream)
	if err != nil {
		return 0
	}
	for i, n := range w.nodes {
		if n.Addr() == master.Options().Addr {
			return i
		}
	}
	return 0
}

func (w *streamsWorld) count(m map[string]int, k string) {
	w.mu.Lock()
	m[k]++
	w.mu.Unlock()
}

func (w *streamsWorld) fail(format string, args ...any) {
	w.mu.Lock()
	w.errs = append(w.errs, fmt.Sprintf(format, args...))
	w.mu.Unlock()
}

// plan draws a message's plan (from its own seed, so a replay draws the
// same plan for the same message number).
func (w *streamsWorld) plan(n int) *msgPlan {
	r := rand.New(rand.NewPCG(w.seed, uint64(n)))
	p := &msgPlan{}
	switch x := r.IntN(100); {
	case x < 70:
	case x < 85:
		p.fails = 1
	case x < 95:
		p.fails = 1 + r.IntN(w.cfg.MaxAttempts)
	default:
		p.fails = w.cfg.MaxAttempts + r.IntN(2) // doomed
	}
	p.exit = []string{"error", "panic", "goexit"}[r.IntN(3)]
	for range p.fails + 2 {
		var d time.Duration
		switch x := r.IntN(100); {
		case x < 60:
			d = time.Duration(r.IntN(20)) * time.Millisecond
		case x < 94:
			d = time.Duration(20+r.IntN(100)) * time.Millisecond
		default: // slower than ClaimIdle
			d = w.cfg.ClaimIdle + time.Duration(r.Int64N(int64(w.cfg.ClaimIdle)*3/2))
		}
		stubborn := r.IntN(25) == 0
		if stubborn { // ignores its context, longer than a stop waits
			d = w.cfg.StopTimeout + time.Duration(r.Int64N(int64(3*time.Second)))
		}
		p.durations = append(p.durations, d)
		p.stubborn = append(p.stubborn, stubborn)
	}
	return p
}

// handler is one incarnation's handler: it follows the message's plan and
// records the run.
func (w *streamsWorld) handler(inc *incarnation) Handler {
	return func(ctx context.Context, m Message) (err error) {
		w.handlers.Add(1)
		defer w.handlers.Done()
		key := string(m.Data)
		r := &run{id: m.ID, consumer: inc.name, attempt: m.Attempt, start: time.Now()}
		w.mu.Lock()
		p := w.plans[key]
		n := len(w.runs[m.ID])
		w.runs[m.ID] = append(w.runs[m.ID], r)
		w.active[m.ID]++
		w.lastActivity = r.start
		w.mu.Unlock()
		inc.mu.Lock()
		inc.active[r] = true
		inc.mu.Unlock()
		defer func() {
			w.mu.Lock()
			r.end = time.Now()
			w.active[m.ID]--
			w.lastActivity = r.end
			w.mu.Unlock()
			inc.mu.Lock()
			delete(inc.active, r)
			inc.mu.Unlock()
		}()
		if p == nil { // not ours
			r.outcome = "ok"
			return nil
		}
		i := min(n, len(p.durations)-1)
		timer := time.NewTimer(p.durations[i])
		defer timer.Stop()
		var cancelled <-chan struct{}
		if !p.stubborn[i] {
			cancelled = ctx.Done()
		}
		select {
		case <-timer.C:
		case <-cancelled:
			r.outcome = "stopped"
			return ctx.Err()
		case <-inc.crashed:
			r.outcome = "crashed"
			return errors.New("crashed")
		}
		select {
		case <-inc.crashed:
			r.outcome = "crashed"
			return errors.New("crashed")
		default:
		}
		w.mu.Lock()
		failing := w.failsDone[key] < p.fails
		if failing {
			w.failsDone[key]++
		}
		w.mu.Unlock()
		stopped := ctx.Err() != nil // streamfx does not count a failure the stop cancelled
		switch {
		case !failing:
			r.outcome = "ok"
			return nil
		case stopped:
			r.outcome = "stopped"
		default:
			r.outcome = p.exit
		}
		switch p.exit {
		case "panic":
			panic("planned failure")
		case "goexit": // t.FailNow in a handler under test
			runtime.Goexit()
		}
		return errors.New("planned failure")
	}
}

// recHook records the dead-letter XADDs a consumer's client sends, and the
// reads and claims that failed (their reply may be lost: a delivery the
// consumer never saw).
type recHook struct {
	w        *streamsWorld
	consumer string
}

func (recHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (recHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h recHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		sent := time.Now()
		switch name := cmd.Name(); {
		case name == "xreadgroup" || name == "xclaim":
			err := next(ctx, cmd)
			if err != nil && !errors.Is(err, redis.Nil) {
				h.w.mu.Lock()
				h.w.blind = append(h.w.blind, [2]time.Time{sent, time.Now()})
				h.w.mu.Unlock()
			}
			return err
		case name != "xadd" || len(args) < 2 || fmt.Sprint(args[1]) != h.w.stream+DLQSuffix:
			return next(ctx, cmd)
		}
		id := ""
		for i := 2; i+1 < len(args); i++ {
			if fmt.Sprint(args[i]) == FieldOriginalID {
				id = fmt.Sprint(args[i+1])
			}
		}
		err := next(ctx, cmd)
		h.w.mu.Lock()
		h.w.dlq = append(h.w.dlq, dlqWrite{id: id, consumer: h.consumer, sent: sent, returned: time.Now(), err: err})
		h.w.lastActivity = time.Now()
		h.w.mu.Unlock()
		return err
	}
}

// startConsumer starts a consumer in slot i: a new name, or (sometimes)
// the name of the slot's last one, as a restarted process keeps it.
func (w *streamsWorld) startConsumer(i int, name string) {
	rdb := w.newClient(300*time.Millisecond, 0)
	rdb.AddHook(recHook{w: w, consumer: name})
	core, logs := zapobserver.New(zapcore.WarnLevel)
	cfg := w.cfg
	cfg.Consumer = name
	cfg.BatchSize = 1 + int((w.seed>>(i*4))%10)
	cfg.Concurrency = 1 + int((w.seed>>(i*4+20))%3)
	s, err := New(rdb, cfg, WithLogger(zap.New(core)))
	if err != nil {
		w.t.Fatal(err)
	}
	inc := &incarnation{name: name, s: s, rdb: rdb, crashed: make(chan struct{}), logs: logs, active: map[*run]bool{}}
	_ = s.Handle(w.stream, w.handler(inc))
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := s.Start(ctx); err != nil { // Redis restarting: the slot stays empty
		_ = rdb.Close()
		w.count(w.ops, "start failed")
		return
	}
	w.mu.Lock()
	w.slots[i] = inc
	w.all = append(w.all, inc)
	w.ops["consumer start"]++
	w.mu.Unlock()
}

// stopConsumer stops slot i's consumer gracefully and checks the bound.
func (w *streamsWorld) stopConsumer(inc *incarnation) {
	began := time.Now()
	err := inc.s.Stop(context.Background())
	took := time.Since(began)
	inc.mu.Lock()
	for r := range inc.active { // still running: abandoned
		w.mu.Lock()
		r.abandoned = time.Now()
		w.mu.Unlock()
	}
	inc.mu.Unlock()
	_ = inc.rdb.Close()
	bound := w.cfg.StopTimeout + 2*w.cfg.StoreTimeout + time.Second
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopTimes = append(w.stopTimes, took)
	if err != nil {
		w.ops["stop with error"]++
	}
	if took > bound {
		w.errs = append(w.errs, fmt.Sprintf("stop of %s took %v (bound %v): %v", inc.name, took, bound, err))
	}
}

// crash kills a consumer: its client closes at once (nothing more reaches
// Redis), its handlers end; the messages it held stay pending.
func (w *streamsWorld) crash(inc *incarnation) {
	_ = inc.rdb.Close()
	close(inc.crashed)
	w.crashStops.Add(1)
	go func() { defer w.crashStops.Done(); _ = inc.s.Stop(context.Background()) }() // frees its goroutines; it reaches Redis no more
}

func (w *streamsWorld) publish(ctx context.Context) {
	n := 0
	r := rand.New(rand.NewPCG(w.seed, 0xbeef))
	for ctx.Err() == nil {
		burst := 1
		if r.IntN(15) == 0 { // a burst: consumers fetch full batches
			burst = 5 + r.IntN(15)
		}
		for range burst {
			key := fmt.Sprint("m", n)
			p := w.plan(n)
			n++
			w.mu.Lock()
			w.plans[key] = p
			w.mu.Unlock()
			w.pubMu.Lock()
			cctx, cancel := context.WithTimeout(context.Background(), time.Second)
			id, err := w.pub.XAdd(cctx, &redis.XAddArgs{Stream: w.stream, Values: []any{FieldData, key}}).Result()
			cancel()
			w.pubMu.Unlock()
			w.mu.Lock()
			if err == nil {
				w.ids[key] = id
			} else {
				w.ambiguous[key] = true
			}
			w.mu.Unlock()
		}
		sleepCtx(ctx, time.Duration(r.IntN(60*burst))*time.Millisecond)
		// Backpressure: the consumers' capacity shrinks with the faults; a
		// backlog that grows for minutes would never settle.
		for ctx.Err() == nil {
			g, err := w.admin.XInfoGroups(ctx, w.stream).Result()
			if err != nil || len(g) != 1 || g[0].Lag+g[0].Pending < 200 {
				break
			}
			w.count(w.ops, "publisher waited for the backlog")
			sleepCtx(ctx, 100*time.Millisecond)
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// run drives the publisher, the consumers and the faults for d, then
// settles everything.
func (w *streamsWorld) run(d time.Duration) {
	probeCtx, stopProbe := context.WithCancel(context.Background())
	var probe sync.WaitGroup
	probe.Go(func() { w.watchStalls(probeCtx) })
	defer func() { stopProbe(); probe.Wait() }()
	for i := range checkSlots - 1 {
		w.startConsumer(i, fmt.Sprintf("c%d-0", i))
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var bg sync.WaitGroup
	bg.Add(1)
	go func() { defer bg.Done(); w.publish(ctx) }()
	gen := 0
	for ctx.Err() == nil {
		sleepCtx(ctx, time.Duration(100+w.rng.IntN(400))*time.Millisecond)
		if ctx.Err() != nil {
			break
		}
		i := w.rng.IntN(checkSlots)
		w.mu.Lock()
		inc := w.slots[i]
		w.mu.Unlock()
		switch x := w.rng.IntN(100); {
		case x < 30: // a slot changes: crash, stop, or start
			if inc == nil {
				gen++
				name := fmt.Sprintf("c%d-%d", i, gen)
				if w.rng.IntN(3) == 0 && len(w.all) > 0 {
					name = w.all[w.rng.IntN(len(w.all))].name // a restarted process that kept its name
				}
				w.startConsumer(i, name)
				continue
			}
			w.mu.Lock()
			w.slots[i] = nil
			w.mu.Unlock()
			if w.rng.IntN(2) == 0 {
				w.count(w.faults, "consumer crash")
				w.crash(inc)
			} else {
				w.count(w.ops, "consumer stop")
				bg.Add(1)
				go func() { defer bg.Done(); w.stopConsumer(inc) }()
			}
		case x < 50:
			w.count(w.faults, "client kill")
			w.killClients()
		case x < 70:
			mode := []string{"ALL", "WRITE"}[w.rng.IntN(2)]
			p := time.Duration(w.rng.Int64N(int64(w.cfg.ClaimIdle / 4)))
			w.count(w.faults, "client pause "+mode)
			w.everyNode(func(c *redis.Client) error {
				return c.Do(context.Background(), "CLIENT", "PAUSE", p.Milliseconds(), mode).Err()
			})
		case x < 85:
			w.count(w.faults, "script flush")
			w.everyNode(func(c *redis.Client) error { return c.ScriptFlush(context.Background()).Err() })
		default:
			// A Cluster master is out for about its node timeout after a
			// restart (CLUSTERDOWN until it sees the others), and runs in
			// an outage are exempt: restart it a fifth as often, so most
			// of the run is judged.
			if w.mode == "cluster" && w.rng.IntN(5) != 0 {
				w.count(w.faults, "client kill")
				w.killClients()
				continue
			}
			w.restartRedis()
		}
	}
	cancel()
	bg.Wait()
	w.settle()
}

// killClients closes every client connection of every node.
func (w *streamsWorld) killClients() {
	w.everyNode(func(c *redis.Client) error {
		return c.Do(context.Background(), "CLIENT", "KILL", "TYPE", "normal").Err()
	})
}

// everyNode runs a fault's command on every node at once.
func (w *streamsWorld) everyNode(fault func(*redis.Client) error) {
	var wg sync.WaitGroup
	for _, c := range w.admins {
		wg.Go(func() { _ = fault(c) })
	}
	wg.Wait()
}

// restartRedis restarts Redis keeping its data: SAVE, kill, start on the
// same dump (on the Cluster, the stream's master, which keeps its slots
// through nodes.conf), with no publish in between (a publish after the SAVE would be
// lost with the kill; acknowledgements and dead-letter moves undone by it
// are redone by the consumers).
func (w *streamsWorld) restartRedis() {
	ctx := context.Background()
	w.pubMu.Lock()
	defer w.pubMu.Unlock()
	node := w.streamNode()
	before, err := w.admin.XLen(ctx, w.stream).Result()
	if err != nil || w.admins[node].Save(ctx).Err() != nil {
		return
	}
	began := time.Now()
	w.nodes[node].Restart()
	for !w.serving(ctx, node) {
		time.Sleep(5 * time.Millisecond)
	}
	end := time.Now()
	w.mu.Lock()
	w.faults["redis restart"]++
	w.restarts = append(w.restarts, began)
	w.longestRestart = max(w.longestRestart, end.Sub(began))
	if end.Sub(began) > w.cfg.ClaimIdle/4 {
		w.outages = append(w.outages, [2]time.Time{began, end})
	}
	w.mu.Unlock()
	if after, err := w.admin.XLen(ctx, w.stream).Result(); err != nil || after != before {
		w.fail("the restart lost data: XLEN %d before, %d after (%v)", before, after, err)
	}
}

// serving reports whether node answers again, and on the Cluster whether
// it sees the Cluster whole again (its slots served).
func (w *streamsWorld) serving(ctx context.Context, node int) bool {
	if w.mode != "cluster" {
		return w.admins[node].Ping(ctx).Err() == nil
	}
	info, err := w.admins[node].ClusterInfo(ctx).Result()
	return err == nil && strings.Contains(info, "cluster_state:ok") && w.admin.XLen(ctx, w.stream).Err() == nil
}

// settle starts a consumer in every empty slot and waits until the group
// has nothing pending or undelivered, then stops them all.
func (w *streamsWorld) settle() {
	w.mu.Lock()
	var empty []int
	for i, inc := range w.slots {
		if inc == nil {
			empty = append(empty, i)
		}
	}
	w.mu.Unlock()
	for _, i := range empty {
		for try := 0; w.slots[i] == nil && try < 50; try++ {
			w.startConsumer(i, fmt.Sprintf("c%d-final", i))
		}
	}
	ctx := context.Background()
	settling := time.Now()
	deadline := settling.Add(60 * time.Second)
	for {
		groups, err := w.admin.XInfoGroups(ctx, w.stream).Result()
		if err == nil && len(groups) == 1 && groups[0].Pending == 0 && groups[0].Lag == 0 {
			break
		}
		if time.Now().After(deadline) {
			w.fail("not settled 60s after the faults stopped: %+v %v", groups, err)
			break
		}
		// Stubborn runs last at most StopTimeout+3s and a claim comes within
		// 1.5×ClaimIdle: 10s with nothing run or dead-lettered is a wedge.
		w.mu.Lock()
		idle := min(time.Since(w.lastActivity), time.Since(settling))
		w.mu.Unlock()
		if idle > 10*time.Second {
			w.fail("stalled: nothing ran or was dead-lettered for %v while the group had messages pending or undelivered: %+v %v", idle.Round(time.Second), groups, err)
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	var wg sync.WaitGroup
	for _, inc := range w.slots {
		if inc != nil {
			wg.Add(1)
			go func() { defer wg.Done(); w.stopConsumer(inc) }()
		}
	}
	wg.Wait()
	w.crashStops.Wait()
	w.handlers.Wait() // the abandoned handlers too
}

// check states the invariants over what happened.
func (w *streamsWorld) check() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	ctx := context.Background()
	v := slices.Clone(w.errs)
	// Log lines the checker counts: deliveries not run, give-backs lost,
	// held messages another consumer took.
	notRun := map[string]int{}
	for _, inc := range w.all {
		for _, e := range inc.logs.All() {
			fields := e.ContextMap()
			switch {
			case strings.HasPrefix(e.Message, "stream message lost to another consumer"):
				notRun[fmt.Sprint(fields["message_id"])]++
				w.ops["waiting message lost, not run"]++
			case strings.HasPrefix(e.Message, "stream message not run"):
				notRun[fmt.Sprint(fields["message_id"])]++
				w.ops["waiting message unconfirmed, not run"]++
			case strings.HasPrefix(e.Message, "stream give-back failed"):
				if ids, ok := fields["message_ids"].([]any); ok {
					for _, id := range ids {
						notRun[fmt.Sprint(id)]++
					}
				}
				w.ops["give-back failed"]++
			case strings.HasPrefix(e.Message, "stream message held by this consumer was claimed"):
				w.ops["held message claimed by another"]++
			}
		}
	}
	entries, err := w.admin.XRange(ctx, w.stream, "-", "+").Result()
	if err != nil {
		return append(v, "XRANGE: "+err.Error())
	}
	dlq, err := w.admin.XRange(ctx, w.stream+DLQSuffix, "-", "+").Result()
	if err != nil {
		return append(v, "XRANGE dlq: "+err.Error())
	}
	// Messages still pending, or never delivered: not settled (the settle
	// step has reported it).
	unsettled := map[string]bool{}
	if pel, err := w.admin.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: w.stream, Group: "redisfx", Start: "-", End: "+", Count: 1 << 20}).Result(); err == nil {
		for _, p := range pel {
			unsettled[p.ID] = true
		}
	}
	if g, err := w.admin.XInfoGroups(ctx, w.stream).Result(); err == nil && len(g) == 1 {
		for _, e := range entries {
			if streamIDAfter(e.ID, g[0].LastDeliveredID) {
				unsettled[e.ID] = true
			}
		}
	}
	dead := map[string]int{}
	for _, e := range dlq {
		dead[fmt.Sprint(e.Values[FieldOriginalID])]++
	}
	exempt, exempt3 := 0, 0
	for _, e := range entries {
		id := e.ID
		runs := w.runs[id]
		slices.SortFunc(runs, func(a, b *run) int { return a.start.Compare(b.start) })
		// 1. No two runs at once.
		for i, a := range runs {
			for _, b := range runs[i+1:] {
				if !b.start.Before(a.end) {
					continue
				}
				if (!a.abandoned.IsZero() && b.start.After(a.abandoned)) || w.outageDuring(a.start, a.end) {
					exempt++
					continue
				}
				v = append(v, fmt.Sprintf("%s (%v) ran twice at once: %s attempt %d %s..%s (%s) and %s attempt %d from %s (%s)",
					id, e.Values[FieldData], a.consumer, a.attempt, a.start.Format("15:04:05.000"), a.end.Format("15:04:05.000"), a.outcome,
					b.consumer, b.attempt, b.start.Format("15:04:05.000"), b.outcome))
			}
		}
		ok := slices.ContainsFunc(runs, func(r *run) bool { return r.outcome == "ok" })
		// 2. Settled: acknowledged after a success, or dead-lettered.
		if unsettled[id] {
			continue // reported as not settled
		}
		if dead[id] == 0 && !ok {
			v = append(v, fmt.Sprintf("%s (%v) was acknowledged without a successful run (%d runs)", id, e.Values[FieldData], len(runs)))
		}
		if dead[id] > 0 {
			w.ops["dead-lettered"]++
			if dead[id] > 1 {
				w.ops["dead-lettered twice"]++
			}
		}
		// 3. No dead-letter while a run of it succeeds.
		for _, d := range w.dlq {
			if d.id != id || d.err != nil {
				continue
			}
			for _, r := range runs {
				if r.outcome != "ok" || !r.start.Before(d.sent) || !d.returned.Before(r.end) {
					continue
				}
				if (!r.abandoned.IsZero() && r.abandoned.Before(d.sent)) || w.outageDuring(r.start, d.sent) || w.afterExemptRun(runs, d) {
					exempt3++ // its stop abandoned it, or Redis did not answer for long: outside the promise
					continue
				}
				v = append(v, fmt.Sprintf("%s (%v) dead-lettered at %s by %s while %s's run (attempt %d) %s..%s was succeeding",
					id, e.Values[FieldData], d.sent.Format("15:04:05.000"), d.consumer, r.consumer, r.attempt, r.start.Format("15:04:05.000"), r.end.Format("15:04:05.000")))
			}
		}
		// 4. A stop costs no attempt.
		for i, r := range runs {
			if r.outcome != "stopped" {
				continue
			}
			for _, d := range w.dlq {
				if d.id == id && d.consumer == r.consumer && !d.sent.Before(r.end) && w.lastRunBefore(runs, r.consumer, d.sent) == r {
					v = append(v, fmt.Sprintf("%s (%v) dead-lettered by %s after the stop cancelled its attempt %d", id, e.Values[FieldData], r.consumer, r.attempt))
				}
			}
			if i+1 >= len(runs) {
				continue
			}
			next := runs[i+1]
			if next.attempt != r.attempt && !w.unseenBetween(id, notRun, r.end, next.start) {
				v = append(v, fmt.Sprintf("%s (%v): the stop cancelled %s's attempt %d, yet %s ran it next as attempt %d",
					id, e.Values[FieldData], r.consumer, r.attempt, next.consumer, next.attempt))
			}
		}
	}
	if exempt > 0 {
		w.ops["overlaps exempt (abandoned, a slow restart or a stall)"] += exempt
	}
	if exempt3 > 0 {
		w.ops["dead-lettered during an abandoned run, a slow restart or a stall (exempt)"] += exempt3
	}
	// Every publish that succeeded is in the stream.
	have := map[string]bool{}
	for _, e := range entries {
		have[fmt.Sprint(e.Values[FieldData])] = true
	}
	for key, id := range w.ids {
		if !have[key] {
			v = append(v, fmt.Sprintf("published %s (%s) is not in the stream", key, id))
		}
	}
	w.ops["messages"] = len(entries)
	return v
}

// streamIDAfter reports whether stream id a comes after b.
func streamIDAfter(a, b string) bool {
	parse := func(id string) (ms, seq uint64) {
		m, q, _ := strings.Cut(id, "-")
		ms, _ = strconv.ParseUint(m, 10, 64)
		seq, _ = strconv.ParseUint(q, 10, 64)
		return ms, seq
	}
	am, as := parse(a)
	bm, bs := parse(b)
	return am > bm || (am == bm && as > bs)
}

// outageDuring reports whether Redis did not answer, longer than
// ClaimIdle/4, or the process or Redis stalled longer than ClaimIdle/3,
// while [from, to] lasted.
func (w *streamsWorld) outageDuring(from, to time.Time) bool {
	for _, o := range slices.Concat(w.outages, w.stalls) {
		if o[0].Before(to) && o[1].After(from) {
			return true
		}
	}
	return false
}

// watchStalls records a stall whenever one turn of a probe (sleep
// idemcheck.StallProbeEvery, then PING) takes longer than that plus
// ClaimIdle/3, until ctx ends: the process was not scheduled (the race
// detector on a loaded machine), or Redis did not answer. A consumer cut
// off from Redis that long, by a pause of Redis or of the process, may
// lose a message it is running to another consumer: docs/streams.md puts
// that outside the promise, so rules 1 and 3 exempt a stall as they exempt
// a slow restart. Injected pauses are shorter than ClaimIdle/4.
func (w *streamsWorld) watchStalls(ctx context.Context) {
	for ctx.Err() == nil {
		began := time.Now()
		sleepCtx(ctx, idemcheck.StallProbeEvery)
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_ = w.admin.Ping(pctx).Err()
		cancel()
		if end := time.Now(); end.Sub(began) > idemcheck.StallProbeEvery+w.cfg.ClaimIdle/3 && ctx.Err() == nil {
			w.mu.Lock()
			w.stalls = append(w.stalls, [2]time.Time{began, end})
			w.faults["stall over ClaimIdle/3 (measured)"]++
			w.mu.Unlock()
		}
	}
}

// afterExemptRun reports whether dead-letter d settles the failure of its
// consumer's own run that an outage overlapped. Rule 1 exempts that run: a
// consumer may have claimed the message beside it and be running it, and
// the two may count different attempts (a restart loses a claim made
// after its SAVE, with the delivery it counted), so the failing run's
// consumer may dead-letter the message beside the other's run: a
// consequence of the exempt overlap, exempt too.
func (w *streamsWorld) afterExemptRun(runs []*run, d dlqWrite) bool {
	last := w.lastRunBefore(runs, d.consumer, d.sent)
	return last != nil && !d.sent.After(last.end.Add(w.cfg.StoreTimeout)) && w.outageDuring(last.start, last.end)
}

// lastRunBefore is consumer's last run of a message that ended before t.
func (w *streamsWorld) lastRunBefore(runs []*run, consumer string, t time.Time) *run {
	var last *run
	for _, r := range runs {
		if r.consumer == consumer && !r.end.After(t) && (last == nil || r.end.After(last.end)) {
			last = r
		}
	}
	return last
}

// unseenBetween reports whether a delivery of id the checker cannot see may
// have happened in [from, to]: a failed give-back or a message not run
// (logged), a restart (it may undo a give-back), a read or claim whose
// reply was lost.
func (w *streamsWorld) unseenBetween(id string, notRun map[string]int, from, to time.Time) bool {
	if notRun[id] > 0 {
		return true
	}
	for _, r := range w.restarts {
		if !r.Before(from) && !r.After(to) {
			return true
		}
	}
	for _, b := range w.blind {
		if b[0].Before(to) && b[1].After(from) {
			return true
		}
	}
	return false
}

// report logs what the run did (docs/reliability.md quotes it).
func (w *streamsWorld) report(d time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	outcomes := map[string]int{}
	total := 0
	for _, rs := range w.runs {
		for _, r := range rs {
			total++
			outcomes[r.outcome]++
			if !r.abandoned.IsZero() {
				outcomes["abandoned"]++
			}
		}
	}
	var maxStop, maxStall time.Duration
	for _, s := range w.stopTimes {
		maxStop = max(maxStop, s)
	}
	for _, s := range w.stalls {
		maxStall = max(maxStall, s[1].Sub(s[0]))
	}
	list := func(m map[string]int) string {
		var out []string
		for k, n := range m {
			out = append(out, fmt.Sprintf("%s %d", k, n))
		}
		slices.SortFunc(out, cmp.Compare)
		return strings.Join(out, ", ")
	}
	w.t.Logf("seed %d, %v, MaxAttempts %d, ClaimIdle %v, StopTimeout %v: %d runs (%s); %d stops, longest %v; ops: %s; faults: %s "+
		"(restarts slower than ClaimIdle/4: %d, longest %v; longest stall %v); publishes failed %d",
		w.seed, d, w.cfg.MaxAttempts, w.cfg.ClaimIdle, w.cfg.StopTimeout, total, list(outcomes), len(w.stopTimes), maxStop.Round(time.Millisecond),
		list(w.ops), list(w.faults), len(w.outages), w.longestRestart.Round(time.Millisecond), maxStall.Round(time.Millisecond), len(w.ambiguous))
}
