package lockfx

// The lock checker: a randomized, fault-injecting test against real Redis
// (a private server, and a 3-master Cluster) that states the lock's promise
// as invariants and hunts for violations.
//
// Several holders (lockers in this process, and one in a child process
// that is SIGKILLed and replaced now and then) take, hold, extend, release
// and walk away from a few locks while faults hit Redis and the holders'
// connections: connection freezes, blackholes, cuts and refused dials,
// CLIENT PAUSE, DEBUG SLEEP, SCRIPT FLUSH and restarts without persistence.
// Every hold is recorded as the holder saw it: from the moment Acquire
// returned to the end of its validity (or its release, if earlier). Then:
//
//  1. No two holds of a name overlap, unless Redis lost data in between (a
//     restart of the node that has the name): a holder that lost its lock
//     was told (its validity had ended) before anyone else acquired it.
//  2. Fencing tokens strictly increase: a hold that began after another
//     one's Acquire returned has a higher token, restarts included; no
//     token is handed out twice.
//  3. Redis never answers a renewal or an Extend that the holder's lock is
//     gone while the holder's validity lasts, unless Redis lost data (the
//     lease in Redis always outlives the holder's view of it).
//  4. Afterwards, once every node answers again, every lock can be taken
//     within the longest lease a holder took (Extend may ask for two TTLs),
//     and no lock key is left without an expiry.
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
	"net"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/redisfx/redisfx/internal/faultproxy"
	"github.com/redisfx/redisfx/internal/idemcheck"
	"github.com/redisfx/redisfx/internal/redistest"
)

// lockCheckerSeeds are seeds that once failed; they run every time,
// before a fresh one.
var lockCheckerSeeds = map[string][]uint64{
	"standalone": {},
	"cluster": {
		// A master restarted near the end: the check that every lock can be
		// taken afterwards ran while the Cluster was still down (fixed in
		// the checker: it waits for cluster_state:ok first).
		1795397784561023859,
	},
}

// checkerNames are the locks the holders fight over: "}c" is laid out
// under the hash tag "~" (its own would be empty).
var checkerNames = []string{"a", "b", "}c"}

func TestLockChecker(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"standalone", "cluster"} {
		t.Run(mode, func(t *testing.T) {
			if mode == "cluster" && testing.Short() {
				t.Skip("-short: the Cluster variant is skipped")
			}
			t.Parallel()
			duration := idemcheck.Duration(t, 3*time.Second)
			for _, seed := range idemcheck.Seeds(t, lockCheckerSeeds[mode]) {
				t.Run(fmt.Sprint(seed), func(t *testing.T) {
					w := newCheckWorld(t, mode, seed)
					w.run(duration)
					if violations := w.check(); len(violations) > 0 {
						for _, v := range violations[:min(len(violations), 20)] {
							t.Error(v)
						}
						t.Errorf("%d violations; replay with:\n  REDISFX_CHECK_SEED=%d REDISFX_CHECK_DURATION=%v go test -race -count=1 -run 'TestLockChecker/%s$' ./lockfx",
							len(violations), seed, duration, mode)
					}
				})
			}
		})
	}
}

// holdEvent is what a holder reports; a child process sends them as JSON
// lines. Times are Unix nanoseconds (one machine, one wall clock).
type holdEvent struct {
	Kind   string `json:"k"` // begin, valid, end
	ID     string `json:"id"`
	Name   string `json:"name,omitempty"`
	Token  int64  `json:"token,omitempty"`
	Sent   int64  `json:"sent,omitempty"`  // the successful acquire call was sent
	Start  int64  `json:"start,omitempty"` // Acquire returned
	Valid  int64  `json:"valid,omitempty"` // the validity's end as last seen
	End    int64  `json:"end,omitempty"`   // the holder stopped relying on the lock
	Result string `json:"result,omitempty"`
	// RedisLost: Redis said the lock was gone while the validity lasted.
	RedisLost bool  `json:"redisLost,omitempty"`
	At        int64 `json:"at,omitempty"` // when RedisLost was seen
}

// hold is one holder's tenure of a lock, as the holder saw it.
type hold struct {
	ID, Name, Result   string
	Token              int64
	Sent, Start, End   time.Time
	RedisLost          bool
	RedisLostAt, Valid time.Time
}

// checkStats counts what a run did, for the report.
type checkStats struct {
	acquired, notAcquired, acquireErrors, gaveUp      atomic.Int64
	lost, released, releasedLost, releasedNotOwner    atomic.Int64
	releaseErrors                                     atomic.Int64
	walkedAway, extended, extendErrors, childrenKills atomic.Int64
	faults, exits                                     sync.Map // kind -> *atomic.Int64
}

func (s *checkStats) fault(kind string) { count(&s.faults, kind) }

// fnExit counts a WithLock fn left by exit.
func (s *checkStats) fnExit(exit string) { count(&s.exits, exit) }

func count(m *sync.Map, kind string) {
	n, _ := m.LoadOrStore(kind, new(atomic.Int64))
	n.(*atomic.Int64).Add(1)
}

// counts lists m's counters, sorted.
func counts(m *sync.Map) string {
	var out []string
	m.Range(func(k, v any) bool {
		out = append(out, fmt.Sprintf("%s %d", k, v.(*atomic.Int64).Load()))
		return true
	})
	slices.SortFunc(out, cmp.Compare)
	return strings.Join(out, ", ")
}

// checkClient is one holder's Redis client and the proxies its
// connections go through (one per node).
type checkClient struct {
	rdb     redis.UniversalClient
	proxies []*faultproxy.Proxy
	dialMap map[string]string // node address -> proxy address
}

// checkWorld is one seed's run.
type checkWorld struct {
	t       *testing.T
	mode    string
	seed    uint64
	rng     *rand.Rand // the fault schedule's
	nodes   []*redistest.Server
	admin   []*redis.Client // direct, one per node
	nodeOf  map[string]int  // lock name -> node index
	clients []*checkClient
	stats   checkStats
	maxTTL  time.Duration

	mu       sync.Mutex
	holds    []hold
	open     map[string]*hold // begun, not ended (children's)
	restarts []checkRestart
}

type checkRestart struct {
	node int
	at   time.Time // just before the kill
}

func newCheckWorld(t *testing.T, mode string, seed uint64) *checkWorld {
	w := &checkWorld{t: t, mode: mode, seed: seed, rng: rand.New(rand.NewPCG(seed, 0x10c4)), open: map[string]*hold{}, nodeOf: map[string]int{}}
	switch mode {
	case "standalone":
		w.nodes = []*redistest.Server{redistest.StartPrivate(t)}
	case "cluster":
		w.nodes = redistest.StartCluster(t, 3, 0).Nodes
	}
	for _, n := range w.nodes {
		w.admin = append(w.admin, n.Client())
	}
	probe := w.newClient()
	l := mustNew(t, probe.rdb, Config{})
	for _, name := range checkerNames {
		w.nodeOf[name] = w.nodeIndex(probe.rdb, mustKeys(t, l, name).lock)
	}
	return w
}

// nodeIndex is the node that has key, asked of rdb.
func (w *checkWorld) nodeIndex(rdb redis.UniversalClient, key string) int {
	cc, ok := rdb.(*redis.ClusterClient)
	if !ok {
		return 0
	}
	master, err := cc.MasterForKey(context.Background(), key)
	if err != nil {
		w.t.Fatal(err)
	}
	for i, n := range w.nodes {
		if n.Addr() == master.Options().Addr {
			return i
		}
	}
	w.t.Fatalf("no node is %s", master.Options().Addr)
	return -1
}

// newClient makes a client whose every connection goes through a proxy of
// its own, so that faults hit this holder alone.
func (w *checkWorld) newClient() *checkClient {
	c := w.newProxies()
	c.rdb = dialCheckClient(w.mode, c.dialMap)
	w.t.Cleanup(func() { _ = c.rdb.Close() })
	return c
}

// newProxies puts a proxy in front of every node for one holder (a child
// process dials them itself).
func (w *checkWorld) newProxies() *checkClient {
	c := &checkClient{dialMap: map[string]string{}}
	for _, n := range w.nodes {
		p := faultproxy.Start(w.t, n.Addr())
		c.proxies = append(c.proxies, p)
		c.dialMap[n.Addr()] = p.Addr()
	}
	w.clients = append(w.clients, c)
	return c
}

// dialCheckClient connects to the nodes of dialMap through their proxies.
// A Cluster client learns node addresses from the nodes themselves; its
// dialer maps each to the proxy in front of it.
func dialCheckClient(mode string, dialMap map[string]string) redis.UniversalClient {
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		if p, ok := dialMap[addr]; ok {
			addr = p
		}
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}
	maint := &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	if mode == "standalone" {
		for node := range dialMap {
			return redis.NewClient(&redis.Options{Addr: node, Dialer: dial, ContextTimeoutEnabled: true,
				DisableIdentity: true, MaintNotificationsConfig: maint})
		}
	}
	var seeds []string
	for node := range dialMap {
		seeds = append(seeds, node)
	}
	return redis.NewClusterClient(&redis.ClusterOptions{Addrs: seeds, Dialer: dial, ContextTimeoutEnabled: true,
		DisableIdentity: true, MaintNotificationsConfig: maint})
}

// checkConfig is a holder's lock configuration, drawn from the seed.
func checkConfig(rng *rand.Rand) Config {
	return Config{
		TTL:         []time.Duration{300 * time.Millisecond, 500 * time.Millisecond, 800 * time.Millisecond}[rng.IntN(3)],
		AutoRenew:   rng.IntN(2) == 0,
		Attempts:    1 + rng.IntN(10),
		Backoff:     5 * time.Millisecond,
		MaxBackoff:  50 * time.Millisecond,
		WaitTimeout: []time.Duration{100 * time.Millisecond, 500 * time.Millisecond, 1500 * time.Millisecond}[rng.IntN(3)],
	}
}

const (
	checkLockers        = 3 // in this process
	checkWorkersPerLock = 2
)

// run lets the holders and the faults loose for d, then stops them all.
func (w *checkWorld) run(d time.Duration) {
	ctx, stop := context.WithTimeout(context.Background(), d)
	defer stop()
	var workers, faults sync.WaitGroup
	fns := newFnRuns()
	var lockers []*Locker
	for i := range checkLockers {
		c := w.newClient()
		cfg := checkConfig(w.rng)
		w.maxTTL = max(w.maxTTL, cfg.TTL)
		l := mustNew(w.t, c.rdb, cfg)
		lockers = append(lockers, l)
		for j := range checkWorkersPerLock {
			rng := rand.New(rand.NewPCG(w.seed, uint64(i*checkWorkersPerLock+j+1)))
			workers.Go(func() { holdLocks(ctx, l, cfg, rng, fmt.Sprintf("p%d.w%d", i, j), w.event, &w.stats, fns) })
		}
	}
	children := newCheckChildren(w)
	children.spawn()
	faults.Go(func() { w.injectFaults(ctx, children, &faults) })
	workers.Wait()
	faults.Wait()
	children.stop()
	fns.stop(w.t, lockers...)
	for _, c := range w.clients { // every fault over
		for _, p := range c.proxies {
			p.Refuse(false)
			p.SetMode(faultproxy.Forward)
		}
	}
	w.quiesce()
	w.report(d)
}

// holdLocks is one worker: take a random lock, hold it for a while
// (checking it, extending it), then release it or walk away, or hold it in
// WithLock's fn that leaves by a drawn exit; again until ctx ends. It
// reports each hold to event.
func holdLocks(ctx context.Context, l *Locker, cfg Config, rng *rand.Rand, worker string, event func(holdEvent), stats *checkStats, fns *fnRuns) {
	for n := 0; ctx.Err() == nil; n++ {
		name := checkerNames[rng.IntN(len(checkerNames))]
		actx, cancel := ctx, context.CancelFunc(func() {})
		if rng.IntN(3) == 0 { // callers that give up early
			actx, cancel = context.WithTimeout(ctx, time.Duration(20+rng.IntN(300))*time.Millisecond)
		}
		lock, err := l.Acquire(actx, name)
		start := time.Now()
		cancel()
		switch {
		case errors.Is(err, ErrNotAcquired):
			stats.notAcquired.Add(1)
		case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
			stats.gaveUp.Add(1)
		case err != nil:
			stats.acquireErrors.Add(1)
		}
		if err != nil {
			sleepCtx(ctx, time.Duration(1+rng.IntN(30))*time.Millisecond)
			continue
		}
		stats.acquired.Add(1)
		id := fmt.Sprintf("%s.%d", worker, n)
		valid := lock.ValidUntil()
		event(holdEvent{Kind: "begin", ID: id, Name: name, Token: lock.Token, Sent: lock.sent.UnixNano(), Start: start.UnixNano(), Valid: valid.UnixNano()})
		validMoved := func(v time.Time) { event(holdEvent{Kind: "valid", ID: id, Valid: v.UnixNano()}) }
		if rng.IntN(3) == 0 {
			holdInFn(ctx, lock, cfg, rand.New(rand.NewPCG(rng.Uint64(), 1)), validMoved, func(e holdEvent) { e.ID = id; event(e) }, stats, fns)
			continue
		}
		end := holdFor(ctx, lock, cfg, rng, holdDuration(rng, cfg.TTL), validMoved, stats)
		end.ID = id
		event(end)
	}
}

// fnRuns are the WithLock fns of a run. A "never" fn is in holding until
// its lock ends (the Locker stopped renewing it, or its validity ran out),
// then blocked on never.
type fnRuns struct {
	all, holding sync.WaitGroup
	never        chan struct{}
}

func newFnRuns() *fnRuns { return &fnRuns{never: make(chan struct{})} }

// stop stops the lockers, which must end the locks that fns that never
// return hold (their renewals stop), then lets those fns go.
func (f *fnRuns) stop(t testing.TB, lockers ...*Locker) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, l := range lockers {
		if err := l.Stop(ctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
	}
	ended := make(chan struct{})
	go func() { f.holding.Wait(); close(ended) }()
	select {
	case <-ended:
	case <-time.After(5 * time.Second):
		t.Errorf("a lock held by a WithLock fn that never returns was still held 5s after its Locker stopped")
	}
	close(f.never)
	f.all.Wait()
}

// holdInFn holds lock in WithLock's fn (Lock.do), which leaves by an exit
// drawn from fnExits once the hold is over; end reports the hold's end
// before fn leaves. It returns when fn has left, but at once for "never".
func holdInFn(ctx context.Context, lock *Lock, cfg Config, rng *rand.Rand, validMoved func(time.Time), end func(holdEvent), stats *checkStats, fns *fnRuns) {
	exit := fnExits[rng.IntN(len(fnExits))]
	left := make(chan struct{})
	if exit == "never" {
		fns.holding.Add(1)
	}
	fns.all.Go(func() {
		defer close(left)
		defer func() { _ = recover() }()
		_ = lock.do(ctx, func(context.Context, int64) error {
			ev, lost := keepFor(ctx, lock, cfg, rng, holdDuration(rng, cfg.TTL), validMoved, stats)
			if !lost {
				ev.End, ev.Result = earliest(time.Now(), lock.ValidUntil()).UnixNano(), "fn-"+exit
			}
			stats.fnExit(exit)
			switch exit {
			case "error":
				end(ev)
				return errFn
			case "panic":
				end(ev)
				panic("fn panicked")
			case "goexit":
				end(ev)
				runtime.Goexit()
			case "never":
				select {
				case <-lock.Done(): // held (renewed) until then
				case <-fns.never:
				}
				if !lost {
					ev.End = lock.ValidUntil().UnixNano()
				}
				end(ev)
				fns.holding.Done()
				<-fns.never
			default:
				end(ev)
			}
			return nil
		})
	})
	if exit != "never" {
		<-left
	}
}

// holdDuration draws how long a holder keeps a lock: often briefly, often
// most of a TTL, sometimes longer than the TTL (renewals or Extend needed).
func holdDuration(rng *rand.Rand, ttl time.Duration) time.Duration {
	switch r := rng.IntN(10); {
	case r < 4:
		return time.Duration(rng.Int64N(int64(ttl / 5)))
	case r < 8:
		return ttl/5 + time.Duration(rng.Int64N(int64(ttl*4/5)))
	default:
		return ttl + time.Duration(rng.Int64N(int64(ttl)))
	}
}

// holdFor holds lock for d (or until it is lost) and ends the hold: the
// returned event says until when the holder relied on it and how it ended.
func holdFor(ctx context.Context, lock *Lock, cfg Config, rng *rand.Rand, d time.Duration, validMoved func(time.Time), stats *checkStats) holdEvent {
	ev, lost := keepFor(ctx, lock, cfg, rng, d, validMoved, stats)
	if lost {
		return ev
	}
	now, valid := time.Now(), lock.ValidUntil()
	ev.End = earliest(now, valid).UnixNano()
	if !cfg.AutoRenew && rng.IntN(10) == 0 {
		// Walk away: never released, relied on until its validity ends.
		stats.walkedAway.Add(1)
		ev.End, ev.Result = valid.UnixNano(), "walked-away"
		return ev
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 300*time.Millisecond)
	err := lock.Release(rctx)
	cancel()
	switch {
	case err == nil:
		stats.released.Add(1)
		ev.Result = "released"
	case errors.Is(err, ErrLockLost):
		stats.releasedLost.Add(1)
		ev.Result = "released-after-loss"
	case errors.Is(err, ErrNotOwner):
		// Redis no longer had it, or go-redis retried a release whose
		// answer was lost: no evidence either way.
		stats.releasedNotOwner.Add(1)
		ev.Result = "released-not-owner"
	default:
		stats.releaseErrors.Add(1)
		ev.Result = "release-error"
	}
	return ev
}

// keepFor holds lock for d, checking and extending it; lost reports that
// it was lost meanwhile (ev then says until when the holder relied on it).
func keepFor(ctx context.Context, lock *Lock, cfg Config, rng *rand.Rand, d time.Duration, validMoved func(time.Time), stats *checkStats) (ev holdEvent, lost bool) {
	ev = holdEvent{Kind: "end"}
	valid := lock.ValidUntil()
	for until := time.Now().Add(d); ctx.Err() == nil && time.Now().Before(until); {
		err := lock.Err()
		now := time.Now()
		if v := lock.ValidUntil(); !v.Equal(valid) {
			valid = v
			validMoved(v)
		}
		if err != nil {
			stats.lost.Add(1)
			if now.Before(valid) { // lost by Redis's word, not by the clock
				ev.RedisLost, ev.At = true, now.UnixNano()
			}
			ev.End, ev.Result = valid.UnixNano(), "lost"
			return ev, true
		}
		if !cfg.AutoRenew && rng.IntN(8) == 0 {
			ectx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			err := lock.Extend(ectx, time.Duration(rng.Int64N(int64(cfg.TTL*2))))
			cancel()
			if errors.Is(err, ErrLockLost) && time.Now().Before(valid) {
				continue // Redis said another owner has it: reported as lost above, next round
			}
			if err != nil {
				stats.extendErrors.Add(1)
			} else {
				stats.extended.Add(1)
			}
		}
		sleepCtx(ctx, time.Duration(2+rng.IntN(20))*time.Millisecond)
	}
	return ev, false
}

func earliest(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d) // the pause between operations, drawn from the seed
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// event records a holder's report.
func (w *checkWorld) event(e holdEvent) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch e.Kind {
	case "begin":
		w.open[e.ID] = &hold{ID: e.ID, Name: e.Name, Token: e.Token, Sent: time.Unix(0, e.Sent), Start: time.Unix(0, e.Start), Valid: time.Unix(0, e.Valid)}
	case "valid":
		if h := w.open[e.ID]; h != nil {
			h.Valid = time.Unix(0, e.Valid)
		}
	case "end":
		h := w.open[e.ID]
		if h == nil {
			return
		}
		delete(w.open, e.ID)
		h.End, h.Result, h.RedisLost = time.Unix(0, e.End), e.Result, e.RedisLost
		if e.RedisLost {
			h.RedisLostAt = time.Unix(0, e.At)
		}
		w.holds = append(w.holds, *h)
	}
}

// killed ends the open holds of a killed child: it relied on each until
// it died or the validity it last reported ended, whichever came first.
func (w *checkWorld) killed(prefix string, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for id, h := range w.open {
		if strings.HasPrefix(id, prefix) {
			delete(w.open, id)
			h.End, h.Result = earliest(at, h.Valid), "killed"
			w.holds = append(w.holds, *h)
		}
	}
}

// injectFaults hits Redis and the holders' connections at random until
// ctx ends; each fault runs in its own goroutine for its own duration, so
// faults overlap.
func (w *checkWorld) injectFaults(ctx context.Context, children *checkChildren, faults *sync.WaitGroup) {
	lastRestart := time.Now()
	for ctx.Err() == nil {
		sleepCtx(ctx, time.Duration(50+w.rng.IntN(250))*time.Millisecond)
		if ctx.Err() != nil {
			return
		}
		c := w.clients[w.rng.IntN(len(w.clients))]
		p := c.proxies[w.rng.IntN(len(c.proxies))]
		node := w.rng.IntN(len(w.nodes))
		d := time.Duration(w.rng.Int64N(int64(w.maxTTL * 6 / 5)))
		switch kind := w.rng.IntN(10); kind {
		case 0, 1: // some connections of one holder stall, the others work
			conns := p.Conns()
			var frozen []*faultproxy.Conn
			for _, conn := range conns {
				if w.rng.IntN(2) == 0 {
					conn.SetMode(faultproxy.Freeze)
					frozen = append(frozen, conn)
				}
			}
			w.stats.fault("freeze-some-connections")
			faults.Go(func() {
				sleepCtx(ctx, d)
				for _, conn := range frozen {
					conn.SetMode(faultproxy.Forward)
				}
			})
		case 2: // every connection of one holder stalls (bytes held)
			w.stats.fault("freeze-holder")
			p.SetMode(faultproxy.Freeze)
			faults.Go(func() { sleepCtx(ctx, d); p.SetMode(faultproxy.Forward) })
		case 3: // a partition: bytes dropped, no reset
			w.stats.fault("blackhole-holder")
			p.SetMode(faultproxy.Blackhole)
			faults.Go(func() { sleepCtx(ctx, d); p.SetMode(faultproxy.Forward) })
		case 4: // connections reset, and no new ones for a while
			w.stats.fault("cut-and-refuse")
			p.Refuse(true)
			p.CutAll()
			faults.Go(func() { sleepCtx(ctx, d/4); p.Refuse(false) })
		case 5:
			w.stats.fault("client-pause")
			_ = w.admin[node].Do(context.Background(), "CLIENT", "PAUSE", max(1, (d/2).Milliseconds()), "ALL").Err()
		case 6:
			w.stats.fault("debug-sleep")
			faults.Go(func() {
				_ = w.admin[node].Do(context.Background(), "DEBUG", "SLEEP", fmt.Sprintf("%.3f", (d/3).Seconds())).Err()
			})
		case 7:
			w.stats.fault("script-flush")
			_ = w.admin[node].ScriptFlush(context.Background()).Err()
		case 8:
			if time.Since(lastRestart) < 1500*time.Millisecond {
				continue // a restart loses every lock: not all the time
			}
			lastRestart = time.Now()
			w.stats.fault("restart-without-persistence")
			w.mu.Lock()
			w.restarts = append(w.restarts, checkRestart{node: node, at: time.Now()})
			w.mu.Unlock()
			w.nodes[node].Restart()
		case 9:
			w.stats.fault("kill-holder-process")
			w.stats.childrenKills.Add(1)
			children.killAndReplace()
		}
	}
}

// quiesce checks that, every fault over and every holder gone, each lock
// can be taken within the longest lease a holder took (nothing is left
// held for ever) and that no lock key lives without an expiry.
func (w *checkWorld) quiesce() {
	ctx := context.Background()
	w.awaitRedis()
	c := w.newClient()
	l := mustNew(w.t, c.rdb, Config{TTL: time.Second, Attempts: 1 << 20, Backoff: 5 * time.Millisecond, MaxBackoff: 20 * time.Millisecond,
		WaitTimeout: 2 * w.maxTTL})
	for _, name := range checkerNames {
		k, err := l.Acquire(ctx, name)
		if err != nil {
			w.t.Errorf("after the run, lock %q could not be taken: %v", name, err)
			continue
		}
		_ = k.Release(ctx)
	}
	for i, a := range w.admin {
		keys, err := a.Keys(ctx, "*").Result()
		if err != nil {
			w.t.Errorf("KEYS on node %d: %v", i, err)
		}
		for _, k := range keys {
			if pttl := a.PTTL(ctx, k).Val(); pttl == -1 {
				w.t.Errorf("key %q has no expiry", k)
			}
		}
	}
}

// awaitRedis waits until every node answers again after the last fault
// (a restarted Cluster master is CLUSTERDOWN until it has rejoined), for
// at most 20s.
func (w *checkWorld) awaitRedis() {
	deadline := time.Now().Add(20 * time.Second)
	for i, a := range w.admin {
		for {
			err := a.Ping(context.Background()).Err()
			if err == nil && w.mode == "cluster" {
				info, ierr := a.ClusterInfo(context.Background()).Result()
				switch {
				case ierr != nil:
					err = ierr
				case !strings.Contains(info, "cluster_state:ok"):
					err = fmt.Errorf("cluster not ok: %.40s", info)
				}
			}
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				w.t.Fatalf("node %d did not come back after the run: %v", i, err)
			}
			time.Sleep(20 * time.Millisecond) // polling a recovering server: no signal to wait on
		}
	}
}

// check states the invariants over the recorded holds and returns every
// violation.
func (w *checkWorld) check() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	if len(w.open) > 0 {
		out = append(out, fmt.Sprintf("%d holds never ended", len(w.open)))
	}
	byName := map[string][]hold{}
	for _, h := range w.holds {
		byName[h.Name] = append(byName[h.Name], h)
	}
	for name, hs := range byName {
		slices.SortFunc(hs, func(a, b hold) int { return a.Start.Compare(b.Start) })
		out = append(out, w.checkOverlaps(name, hs)...)
		out = append(out, w.checkTokens(name, hs)...)
	}
	for _, h := range w.holds {
		if h.RedisLost && !w.dataLost(h.Name, h.Sent, h.RedisLostAt) {
			out = append(out, fmt.Sprintf("lock %q: Redis no longer had %s's lock (token %d, %s) %v before its validity ended, and lost no data",
				h.Name, h.ID, h.Token, h.Result, h.Valid.Sub(h.RedisLostAt)))
		}
	}
	if w.stats.acquired.Load() == 0 {
		out = append(out, "no lock was ever acquired: the run checked nothing")
	}
	return out
}

// checkOverlaps: no two holds of a name overlap, unless the name's node
// lost its data between the first's acquire and the second's.
func (w *checkWorld) checkOverlaps(name string, hs []hold) []string {
	var out []string
	var live []hold // earlier holds that end after the current start
	for _, b := range hs {
		live = slices.DeleteFunc(live, func(a hold) bool { return !a.End.After(b.Start) })
		for _, a := range live {
			if !w.dataLost(name, a.Sent, b.Start) {
				out = append(out, fmt.Sprintf("lock %q: %s (token %d, %s) still relied on it %v after %s (token %d) acquired it",
					name, a.ID, a.Token, a.Result, a.End.Sub(b.Start), b.ID, b.Token))
			}
		}
		live = append(live, b)
	}
	return out
}

// checkTokens: a hold whose acquire was sent after another's Acquire
// returned has a higher token; no token twice.
func (w *checkWorld) checkTokens(name string, hs []hold) []string {
	var out []string
	seen := map[int64]string{}
	prefixMax := make([]hold, len(hs)) // the highest-token hold among hs[:i+1]
	for i, h := range hs {
		if other, dup := seen[h.Token]; dup {
			out = append(out, fmt.Sprintf("lock %q: token %d handed to %s and %s", name, h.Token, other, h.ID))
		}
		seen[h.Token] = h.ID
		prefixMax[i] = h
		if i > 0 && prefixMax[i-1].Token > h.Token {
			prefixMax[i] = prefixMax[i-1]
		}
	}
	for _, b := range hs {
		before, _ := slices.BinarySearchFunc(hs, b.Sent, func(a hold, t time.Time) int { return a.Start.Compare(t) })
		if before > 0 && prefixMax[before-1].Token >= b.Token {
			a := prefixMax[before-1]
			out = append(out, fmt.Sprintf("lock %q: %s got token %d, not above %d of %s whose Acquire returned %v before",
				name, b.ID, b.Token, a.Token, a.ID, b.Sent.Sub(a.Start)))
		}
	}
	return out
}

// dataLost reports whether the node that has name restarted (losing its
// data) between from and to.
func (w *checkWorld) dataLost(name string, from, to time.Time) bool {
	for _, r := range w.restarts {
		if r.node == w.nodeOf[name] && !r.at.Before(from) && !r.at.After(to) {
			return true
		}
	}
	return false
}

// report logs what the run did (docs/reliability.md quotes it).
func (w *checkWorld) report(d time.Duration) {
	s := &w.stats
	w.mu.Lock()
	holds, restarts := len(w.holds), len(w.restarts)
	w.mu.Unlock()
	w.t.Logf("%s seed %d, %v: %d holds (acquired %d, not acquired %d, caller gave up %d, acquire errors %d); "+
		"lost %d, released %d, released after loss %d, released not owner %d, release errors %d, walked away %d, extended %d (errors %d); "+
		"WithLock fn exits: %s; restarts %d, holder processes killed %d; faults: %s",
		w.mode, w.seed, d, holds, s.acquired.Load(), s.notAcquired.Load(), s.gaveUp.Load(), s.acquireErrors.Load(),
		s.lost.Load(), s.released.Load(), s.releasedLost.Load(), s.releasedNotOwner.Load(), s.releaseErrors.Load(), s.walkedAway.Load(),
		s.extended.Load(), s.extendErrors.Load(), counts(&s.exits), restarts, s.childrenKills.Load(), counts(&s.faults))
}
