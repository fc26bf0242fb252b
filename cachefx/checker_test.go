package cachefx

// The cache checker: a randomized, fault-injecting test against real Redis
// (a private server, and a 3-master Cluster) that states the cache's
// promise as invariants and hunts for violations.
//
// Three "processes" (caches with their own clients, first layers and
// subscriptions; each one now and then crashes: its client is closed under
// its running operations and a fresh process takes its place) run Get,
// GetOrLoad (loaders fast, or slower than the lease; some leave by error,
// panic or runtime.Goexit, a few never return until the run ends), Set, Delete and
// InvalidateByTags on a few keys and tags, while faults hit Redis and the
// processes' connections: connection freezes (whose held commands reach
// Redis late), blackholes, cuts and refused dials, the same on the
// invalidation subscription alone, CLIENT KILL TYPE pubsub, CLIENT PAUSE,
// SCRIPT FLUSH and restarts without persistence. Every value carries the
// id of the write that made it and its tags; every operation is recorded
// with its interval and outcome. A value is older than a write W that
// covers it (a Set or Delete of its key, an invalidation of one of its
// tags) if it was written (Set returned; for a loaded value, the moment
// the loader read its source) before W began. A write that returned an
// error may have reached Redis, even late: its value is never older than
// anything. Then:
//
//  1. After a write returns nil in a process, no read in that process
//     returns a value older than it.
//  2. No read in any process that starts more than two subscription
//     intervals (the first layer's trust window) after a write returned
//     nil returns a value older than it.
//     (Both: unless Redis lost the tag set to a restart in between, for
//     invalidations.)
//  3. After quiescence (faults healed, every subscription has proven
//     itself after the last write), every first-layer entry equals Redis,
//     unless a write that returned an error, or a restart, explains the
//     difference. A failed write may land until a second after it gave
//     up or, if a stall (a frozen connection, a paused Redis) overlapped
//     it, after the stall ended: on a Cluster its message went out when
//     it failed, so it can delete a value written after it began whose
//     copies the other processes keep.
//  4. Every key the cache writes has an expiry no longer than the longest
//     TTL given; a tag set holds only keys tagged with it, scored no
//     later than their values' expiry, and none whose value expired
//     before the set's latest successful add (which prunes them).
//  5. No GetOrLoad runs into its context's deadline unless a loader of its
//     key in its process never returns: a loader that fails by error, panic
//     or runtime.Goexit fails its callers at once.
//
// REDISFX_CHECK_DURATION sets how long each seed runs (default 4s; make
// chaos runs it longer); REDISFX_CHECK_SEED replays one seed. A failure
// prints the seed and the command that replays it. The schedule of
// operations and faults is the seed's; the timing of a real Redis and of
// the Go scheduler is not, so a replay re-creates the same storm, not the
// same interleaving.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"slices"
	"sort"
	"strconv"
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

// cacheCheckerSeeds are seeds that once found a violation; they run every
// time, before a fresh one, for at most keptSeedDuration (a replay re-creates
// the schedule, not the interleaving: the regression tests pin the bugs).
var cacheCheckerSeeds = map[string][]uint64{
	"standalone": {1795394894498682304, // B's own invalidation after A's (TestLocalLayer_OwnInvalidationDropsACopyAnotherProcessInvalidatedFirst)
		1795895202837867060}, // a loader's Goexit left its callers waiting (TestGetOrLoad_LoaderGoexit_EveryCallerGetsAnError_AndTheLeaseIsReleased)
	"cluster": {1795394824119701512, // a load joined after a write (TestGetOrLoad_NeverJoinsALoadOlderThanAWrite)
		// a failed write's message sent with its spent context (TestCluster_FailedDeleteTellsTheOthersWhileTheChannelsMasterAnswers);
		// later, failed writes held by a stall and landing after newer writes, which the checker did not yet excuse (mayLandUntil)
		1795695162752719219},
}

// keptSeedDuration bounds the run of a kept seed, to keep make test short.
const keptSeedDuration = 2 * time.Second

const (
	checkProcs   = 3
	checkWorkers = 2 // per process
	checkKeys    = 6
	checkTags    = 4
)

// checkTTLs are the values' TTLs: short ones expire during a run, long ones
// outlive it, so that first layers still hold them at the end.
var checkTTLs = []time.Duration{300 * time.Millisecond, 2 * time.Second, 30 * time.Second}

// checkCacheConfig is every process's configuration: the trust window is
// 2 s (Local.TTL 4 s: a ping every second).
func checkCacheConfig(prefix string) Config {
	return Config{KeyPrefix: prefix, StoreTimeout: 250 * time.Millisecond, LoadGuardTTL: 600 * time.Millisecond,
		LoadWait: 300 * time.Millisecond, Local: LocalConfig{MaxEntries: 64, TTL: 4 * time.Second}}
}

func TestCacheChecker(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"standalone", "cluster"} {
		t.Run(mode, func(t *testing.T) {
			if mode == "cluster" && testing.Short() {
				t.Skip("-short: the Cluster variant is skipped")
			}
			t.Parallel()
			var nodes []*redistest.Server // one Redis for every seed of the mode
			if mode == "standalone" {
				nodes = []*redistest.Server{redistest.StartPrivate(t)}
			} else {
				nodes = redistest.StartCluster(t, 3, 0).Nodes
			}
			duration := idemcheck.Duration(t, 4*time.Second)
			for _, seed := range idemcheck.Seeds(t, cacheCheckerSeeds[mode]) {
				t.Run(fmt.Sprint(seed), func(t *testing.T) {
					d := duration
					if slices.Contains(cacheCheckerSeeds[mode], seed) && os.Getenv("REDISFX_CHECK_SEED") == "" {
						d = min(d, keptSeedDuration)
					}
					w := newCacheWorld(t, mode, seed, nodes)
					w.run(d)
					if violations := w.check(); len(violations) > 0 {
						for _, v := range violations[:min(len(violations), 20)] {
							t.Error(v)
						}
						t.Errorf("%d violations; replay with:\n  REDISFX_CHECK_SEED=%d REDISFX_CHECK_DURATION=%v go test -race -count=1 -run 'TestCacheChecker/%s$' ./cachefx",
							len(violations), seed, d, mode)
					}
				})
			}
		})
	}
}

// never is the "written" time of a value whose write returned an error: it
// may reach Redis at any time, so it is never older than anything.
const never = time.Duration(math.MaxInt64)

// valueRec is what the checker knows of one value (one write).
type valueRec struct {
	key    string
	tags   []string
	ttl    time.Duration
	loaded bool          // by GetOrLoad, which tells no other process (the key held no value)
	from   time.Duration // its write began (a load: the load began)
	asOf   time.Duration // Set returned nil; a load: its loader read the source; else never
}

// writeRec is a Set, Delete or InvalidateByTags, with its outcome.
type writeRec struct {
	proc       int64 // the process (incarnation) that wrote
	kind       string
	key        string   // set, delete
	tags       []string // set (its value's), invalidate
	start, end time.Duration
	ok         bool
}

// readRec is a Get or GetOrLoad that returned a value.
type readRec struct {
	proc       int64
	op         string
	key        string
	start, end time.Duration
	value      int64
}

// checkProc is one process slot: its proxies and its current incarnation.
type checkProc struct {
	proxies []*faultproxy.Proxy // one per node
	dialMap map[string]string   // node address -> proxy address
	cur     atomic.Pointer[checkIncarnation]
}

// checkIncarnation is one life of a process.
type checkIncarnation struct {
	id    int64
	cache *Cache
	rdb   redis.UniversalClient
}

// cacheWorld is one seed's run.
type cacheWorld struct {
	t       *testing.T
	mode    string
	seed    uint64
	rng     *rand.Rand // the fault schedule's
	prefix  string
	nodes   []*redistest.Server
	admin   []*redis.Client // direct, one per node
	direct  redis.UniversalClient
	procs   []*checkProc
	began   time.Time
	window  time.Duration
	nextInc atomic.Int64
	nextVal atomic.Int64
	faults  sync.Map // kind -> *atomic.Int64

	mu         sync.Mutex
	values     map[int64]*valueRec
	writes     []writeRec
	reads      []readRec
	misses     int
	readErrors int
	restarts   []time.Duration
	stalls     []stall
	faultLog   []string            // each fault and when it began, for a violation's history
	tagAdds    map[string][]tagAdd // tag -> successful additions of a key
	sampled    []string            // violations seen while running
	samples    int
	dead       []*checkIncarnation
	stoppedAt  time.Duration             // the last operation returned
	hangs      map[int64]map[string]bool // incarnation -> keys with a loader that never returns
	runCtx     context.Context           // ends with the run: a hung loader returns then
}

// stall is a fault during which commands are held and reach Redis when it
// ends: a frozen connection, a paused Redis.
type stall struct{ start, end time.Duration }

// landSlack is how long after a stall ends (or after a call gave up) a
// command it held may still reach Redis: the goroutines that pass held
// bytes on are scheduled late on a loaded machine.
const landSlack = time.Second

// tagAdd is a Set that put its key in a tag set and returned nil. A tag's
// additions are recorded in order of end, each with the latest start so
// far.
type tagAdd struct {
	end, latestStart time.Duration
}

func newCacheWorld(t *testing.T, mode string, seed uint64, nodes []*redistest.Server) *cacheWorld {
	w := &cacheWorld{t: t, mode: mode, seed: seed, rng: rand.New(rand.NewPCG(seed, 0xcac4e)), prefix: redistest.Prefix(t),
		nodes: nodes, values: map[int64]*valueRec{}, tagAdds: map[string][]tagAdd{}, hangs: map[int64]map[string]bool{}}
	for _, n := range w.nodes {
		w.admin = append(w.admin, n.Client())
	}
	if mode == "standalone" {
		c := redis.NewClient(&redis.Options{Addr: w.nodes[0].Addr(), DisableIdentity: true, ContextTimeoutEnabled: true,
			MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}})
		t.Cleanup(func() { _ = c.Close() })
		w.direct = c
	} else {
		cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{w.nodes[0].Addr()}, DisableIdentity: true, ContextTimeoutEnabled: true,
			MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}})
		t.Cleanup(func() { _ = cc.Close() })
		w.direct = cc
	}
	for range checkProcs {
		p := &checkProc{dialMap: map[string]string{}}
		for _, n := range w.nodes {
			px := faultproxy.Start(t, n.Addr())
			p.proxies = append(p.proxies, px)
			p.dialMap[n.Addr()] = px.Addr()
		}
		w.procs = append(w.procs, p)
	}
	w.began = time.Now()
	for _, p := range w.procs {
		inc, err := w.incarnate(p)
		if err != nil {
			t.Fatal(err)
		}
		p.cur.Store(inc)
	}
	w.window = w.procs[0].cur.Load().cache.bcast.window
	return w
}

func (w *cacheWorld) now() time.Duration { return time.Since(w.began) }

func (w *cacheWorld) fault(kind string) {
	n, _ := w.faults.LoadOrStore(kind, new(atomic.Int64))
	n.(*atomic.Int64).Add(1)
	w.mu.Lock()
	w.faultLog = append(w.faultLog, fmt.Sprintf("%s at %v", kind, w.now().Round(time.Millisecond)))
	w.mu.Unlock()
}

// dial connects to the nodes of dialMap through their proxies. A Cluster
// client learns node addresses from the nodes themselves; its dialer maps
// each to the proxy in front of it.
func (w *cacheWorld) dial(dialMap map[string]string) redis.UniversalClient {
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		if p, ok := dialMap[addr]; ok {
			addr = p
		}
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}
	maint := &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	if w.mode == "standalone" {
		return redis.NewClient(&redis.Options{Addr: w.nodes[0].Addr(), Dialer: dial, ContextTimeoutEnabled: true,
			DisableIdentity: true, MaintNotificationsConfig: maint})
	}
	return redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{w.nodes[0].Addr()}, Dialer: dial, ContextTimeoutEnabled: true,
		DisableIdentity: true, MaintNotificationsConfig: maint, ClusterStateReloadInterval: time.Second})
}

// incarnate starts a new life of process p (retrying while Redis recovers).
func (w *cacheWorld) incarnate(p *checkProc) (*checkIncarnation, error) {
	rdb := w.dial(p.dialMap)
	c, err := New(rdb, checkCacheConfig(w.prefix))
	if err != nil {
		_ = rdb.Close()
		return nil, err
	}
	for attempt := 0; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err = c.Start(ctx)
		cancel()
		if err == nil {
			return &checkIncarnation{id: w.nextInc.Add(1), cache: c, rdb: rdb}, nil
		}
		if attempt == 20 {
			_ = rdb.Close()
			return nil, fmt.Errorf("a process could not start: %w", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// run lets the processes and the faults loose for d, then stops them all
// and waits for quiescence.
func (w *cacheWorld) run(d time.Duration) {
	ctx, stop := context.WithTimeout(context.Background(), d)
	defer stop()
	w.runCtx = ctx
	var workers, background sync.WaitGroup
	for i, p := range w.procs {
		for j := range checkWorkers {
			rng := rand.New(rand.NewPCG(w.seed, uint64(i*checkWorkers+j+1)))
			workers.Go(func() { w.work(ctx, p, rng) })
		}
	}
	background.Go(func() { w.injectFaults(ctx) })
	background.Go(func() { w.sampleEvery(ctx, 300*time.Millisecond) })
	workers.Wait()
	w.stoppedAt = w.now()
	background.Wait()
	for _, p := range w.procs { // every fault over
		for _, px := range p.proxies {
			px.Refuse(false)
			px.SetMode(faultproxy.Forward)
		}
	}
	w.t.Cleanup(func() {
		for _, p := range w.procs {
			inc := p.cur.Load()
			_ = inc.cache.Close()
			_ = inc.rdb.Close()
		}
	})
}

// work is one worker of a process: random operations until ctx ends.
func (w *cacheWorld) work(ctx context.Context, p *checkProc, rng *rand.Rand) {
	for ctx.Err() == nil {
		inc := p.cur.Load()
		key := fmt.Sprint("k", rng.IntN(checkKeys))
		switch r := rng.IntN(100); {
		case r < 35:
			w.get(inc, key)
		case r < 55:
			w.getOrLoad(inc, key, rng)
		case r < 75:
			w.set(inc, key, rng)
		case r < 82:
			w.delete(inc, key)
		case r < 90:
			w.invalidate(inc, randomTags(rng, 1+rng.IntN(2)))
		default:
			w.contended(inc, key, rng)
		}
		if rng.IntN(4) == 0 {
			time.Sleep(time.Duration(rng.IntN(3000)) * time.Microsecond)
		}
	}
}

// contended is a write of key with reads of it in the same process
// running all along, then one more read: the reads land in every window
// of the write.
func (w *cacheWorld) contended(inc *checkIncarnation, key string, rng *rand.Rand) {
	done := make(chan struct{})
	var readers sync.WaitGroup
	readers.Go(func() {
		for range 200 { // a bound: first-layer hits take a microsecond
			select {
			case <-done:
				return
			default:
				w.get(inc, key)
				time.Sleep(20 * time.Microsecond)
			}
		}
	})
	switch rng.IntN(3) {
	case 0:
		w.set(inc, key, rng)
	case 1:
		w.delete(inc, key)
	default:
		w.invalidate(inc, randomTags(rng, 1+rng.IntN(2)))
	}
	close(done)
	readers.Wait()
	w.get(inc, key)
}

func randomTags(rng *rand.Rand, n int) []string {
	var tags []string
	for _, i := range rng.Perm(checkTags)[:n] {
		tags = append(tags, fmt.Sprint("t", i))
	}
	sort.Strings(tags)
	return tags
}

// encode is a value: its id and its tags.
func encode(id int64, tags []string) []byte {
	return []byte(fmt.Sprintf("%d|%s", id, strings.Join(tags, ",")))
}

func decode(v []byte) (int64, error) {
	id, _, ok := strings.Cut(string(v), "|")
	if !ok {
		return 0, fmt.Errorf("not a checker value: %q", v)
	}
	return strconv.ParseInt(id, 10, 64)
}

func (w *cacheWorld) newValue(key string, tags []string, ttl, from, asOf time.Duration) int64 {
	id := w.nextVal.Add(1)
	w.mu.Lock()
	w.values[id] = &valueRec{key: key, tags: tags, ttl: ttl, loaded: asOf != never, from: from, asOf: asOf}
	w.mu.Unlock()
	return id
}

func (w *cacheWorld) read(inc *checkIncarnation, op, key string, start time.Duration, v []byte, found bool, err error) {
	end := w.now()
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case err != nil && v == nil:
		w.readErrors++
	case !found || v == nil:
		w.misses++
	default:
		id, derr := decode(v)
		if derr != nil {
			w.sampled = append(w.sampled, fmt.Sprintf("%s read a value the checker never wrote: %v", key, derr))
			return
		}
		w.reads = append(w.reads, readRec{proc: inc.id, op: op, key: key, start: start, end: end, value: id})
	}
}

func (w *cacheWorld) get(inc *checkIncarnation, key string) {
	start := w.now()
	v, found, err := inc.cache.Get(context.Background(), key)
	w.read(inc, "Get", key, start, v, found, err)
}

// loadLimit bounds a GetOrLoad caller's wait: far above a load under the
// faults (a few StoreTimeouts and a slow loader).
const loadLimit = 5 * time.Second

func (w *cacheWorld) getOrLoad(inc *checkIncarnation, key string, rng *rand.Rand) {
	tags := randomTags(rng, rng.IntN(3))
	ttl := checkTTLs[rng.IntN(len(checkTTLs))]
	slow := rng.IntN(10) == 0 // slower than the lease: renewals
	exit := ""                // how the loader leaves: with its value, or
	switch r := rng.IntN(100); {
	case r < 4:
		exit = "error"
	case r < 8:
		exit = "panic"
	case r < 12:
		exit = "goexit" // t.FailNow in a loader under test
	case r < 14:
		exit = "hang" // never returns until the run ends
	}
	start := w.now()
	ctx, cancel := context.WithTimeout(context.Background(), loadLimit)
	defer cancel()
	v, err := inc.cache.GetOrLoad(ctx, key, ttl, func(context.Context) ([]byte, error) {
		switch exit {
		case "error":
			return nil, errors.New("planned failure")
		case "panic":
			panic("planned failure")
		case "goexit":
			runtime.Goexit()
		case "hang":
			w.mu.Lock()
			if w.hangs[inc.id] == nil {
				w.hangs[inc.id] = map[string]bool{}
			}
			w.hangs[inc.id][key] = true
			w.mu.Unlock()
			<-w.runCtx.Done()
			return nil, errors.New("a hung loader released at the end of the run")
		}
		id := w.newValue(key, tags, ttl, start, w.now()) // the source is read now
		if slow {
			time.Sleep(700 * time.Millisecond)
		} else {
			time.Sleep(time.Duration(rand.IntN(5)) * time.Millisecond)
		}
		return encode(id, tags), nil
	}, tags...)
	if errors.Is(err, context.DeadlineExceeded) {
		w.mu.Lock()
		if !w.hangs[inc.id][key] {
			w.sampled = append(w.sampled, fmt.Sprintf("GetOrLoad(%s) from %v waited %v for its context's deadline, though no loader of the key in its process hangs",
				key, start.Round(time.Millisecond), loadLimit))
		}
		w.mu.Unlock()
	}
	// (Its tag additions are not recorded: whether it added any is not
	// known here, and invariant 4 needs additions that surely happened.)
	w.read(inc, "GetOrLoad", key, start, v, v != nil, err)
}

// added records tag additions that began at start; their end is taken
// now, under the lock, so ends are in order (and never early).
func (w *cacheWorld) added(tags []string, start time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	end := w.now()
	for _, tag := range tags {
		latest := start
		if adds := w.tagAdds[tag]; len(adds) > 0 {
			latest = max(latest, adds[len(adds)-1].latestStart)
		}
		w.tagAdds[tag] = append(w.tagAdds[tag], tagAdd{end: end, latestStart: latest})
	}
}

func (w *cacheWorld) set(inc *checkIncarnation, key string, rng *rand.Rand) {
	tags := randomTags(rng, rng.IntN(3))
	ttl := checkTTLs[rng.IntN(len(checkTTLs))]
	start := w.now()
	id := w.newValue(key, tags, ttl, start, never)
	err := inc.cache.Set(context.Background(), key, encode(id, tags), ttl, tags...)
	end := w.now()
	w.mu.Lock()
	if err == nil {
		w.values[id].asOf = end
	}
	w.writes = append(w.writes, writeRec{proc: inc.id, kind: "set", key: key, tags: tags, start: start, end: end, ok: err == nil})
	w.mu.Unlock()
	if err == nil {
		w.added(tags, start)
	}
}

func (w *cacheWorld) delete(inc *checkIncarnation, key string) {
	start := w.now()
	_, err := inc.cache.Delete(context.Background(), key)
	w.mu.Lock()
	w.writes = append(w.writes, writeRec{proc: inc.id, kind: "delete", key: key, start: start, end: w.now(), ok: err == nil})
	w.mu.Unlock()
}

func (w *cacheWorld) invalidate(inc *checkIncarnation, tags []string) {
	start := w.now()
	_, err := inc.cache.InvalidateByTags(context.Background(), tags...)
	w.mu.Lock()
	w.writes = append(w.writes, writeRec{proc: inc.id, kind: "invalidate", tags: tags, start: start, end: w.now(), ok: err == nil})
	w.mu.Unlock()
}

// injectFaults runs one fault at a time until ctx ends, each healed before
// the next.
func (w *cacheWorld) injectFaults(ctx context.Context) {
	lastRestart := time.Now()
	for ctx.Err() == nil {
		if !sleepCtx(ctx, time.Duration(100+w.rng.IntN(300))*time.Millisecond) {
			return
		}
		p := w.procs[w.rng.IntN(len(w.procs))]
		node := w.rng.IntN(len(w.nodes))
		px := p.proxies[node]
		d := time.Duration(100+w.rng.IntN(600)) * time.Millisecond
		if w.rng.IntN(5) == 0 { // longer than the trust window
			d = time.Duration(2500+w.rng.IntN(1000)) * time.Millisecond
		}
		ctl := context.Background()
		switch r := w.rng.IntN(14); r {
		case 0, 1: // a stall: held commands reach Redis when it ends
			w.fault("freeze")
			start := w.now()
			px.SetMode(faultproxy.Freeze)
			sleepCtx(ctx, d)
			px.SetMode(faultproxy.Forward)
			w.stalled(start)
		case 2: // a NAT that forgot the connections: they never come back
			w.fault("blackhole")
			px.SetMode(faultproxy.Blackhole)
			sleepCtx(ctx, d)
			px.CutAll()
			px.SetMode(faultproxy.Forward)
		case 3:
			w.fault("cut")
			px.CutAll()
		case 4:
			w.fault("refuse")
			px.Refuse(true)
			px.CutAll()
			sleepCtx(ctx, d)
			px.Refuse(false)
		case 5: // the invalidation subscription alone, stalled
			w.fault("freeze-subscription")
			subs := px.Subscribers()
			for _, c := range subs {
				c.SetMode(faultproxy.Freeze)
			}
			sleepCtx(ctx, d)
			for _, c := range subs {
				c.SetMode(faultproxy.Forward)
			}
		case 6: // the subscription alone, forgotten by a NAT: the process must notice
			w.fault("blackhole-subscription")
			for _, c := range px.Subscribers() {
				c.Lose() // for good: a later heal of px must not bring it back with messages lost
			}
		case 7:
			w.fault("cut-subscription")
			for _, c := range px.Subscribers() {
				c.Cut()
			}
		case 8:
			w.fault("client-kill-pubsub")
			_ = w.admin[node].Do(ctl, "CLIENT", "KILL", "TYPE", "pubsub").Err()
		case 9:
			w.fault("client-pause")
			start := w.now()
			_ = w.admin[node].Do(ctl, "CLIENT", "PAUSE", min(d, 500*time.Millisecond).Milliseconds(), "ALL").Err()
			sleepCtx(ctx, d)
			w.stalled(start)
		case 10, 11:
			w.fault("script-flush")
			_ = w.admin[node].ScriptFlush(ctl).Err()
		case 12:
			if time.Since(lastRestart) < 2*time.Second {
				continue
			}
			lastRestart = time.Now()
			w.fault("restart")
			w.mu.Lock()
			w.restarts = append(w.restarts, w.now())
			w.mu.Unlock()
			w.nodes[node].Restart()
		case 13:
			w.fault("process-crash")
			w.crash(p)
		}
	}
}

// stalled records a stall that began at start and has just ended.
func (w *cacheWorld) stalled(start time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stalls = append(w.stalls, stall{start: start, end: w.now()})
}

// mayLandUntil is the latest time a write that returned an error may have
// reached Redis: soon after it gave up, unless a stall held it, then soon
// after the stall ended. Such a late write deletes or replaces whatever
// was written meanwhile, and the other processes were told when it
// failed, before it landed (cache.md: "one that reaches Redis late ...
// overwrites whatever was written meanwhile"). w.mu is held.
func (w *cacheWorld) mayLandUntil(wr writeRec) time.Duration {
	until := wr.end
	for _, s := range w.stalls {
		if s.start <= wr.end && s.end >= wr.start {
			until = max(until, s.end)
		}
	}
	return until + landSlack
}

// crash ends the current life of p as a crash would: its client is closed
// under whatever it is doing, and a fresh process takes its place.
func (w *cacheWorld) crash(p *checkProc) {
	fresh, err := w.incarnate(p)
	if err != nil {
		w.mu.Lock()
		w.sampled = append(w.sampled, err.Error())
		w.mu.Unlock()
		return
	}
	old := p.cur.Swap(fresh)
	_ = old.rdb.Close()
	_ = old.cache.Close()
	w.mu.Lock()
	w.dead = append(w.dead, old)
	w.mu.Unlock()
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// sampleEvery checks invariant 4 on Redis's keys while the run lasts.
func (w *cacheWorld) sampleEvery(ctx context.Context, every time.Duration) {
	for sleepCtx(ctx, every) {
		w.sample()
	}
}

// sample reads every key of the run (directly, past the proxies) and
// checks expiries and tag sets.
func (w *cacheWorld) sample() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	longest := slices.Max(checkTTLs)
	const slack = 100 * time.Millisecond
	var found []string
	for _, a := range w.admin {
		keys, err := a.Keys(ctx, w.prefix+"*").Result()
		if err != nil {
			continue // a node down or paused: next sample
		}
		for _, k := range keys {
			pttl, err := a.PTTL(ctx, k).Result()
			if err != nil || pttl == -2 { // gone since KEYS
				continue
			}
			if pttl < 0 {
				found = append(found, fmt.Sprintf("%s has no expiry", k))
				continue
			}
			if pttl > longest+slack {
				found = append(found, fmt.Sprintf("%s lives %v, longer than any TTL given (%v)", k, pttl, longest))
			}
			if tag, ok := strings.CutPrefix(k, w.prefix+"default#tagset:"); ok {
				found = append(found, w.checkTagSet(ctx, a, k, tag)...)
			}
		}
	}
	w.mu.Lock()
	w.samples++
	w.sampled = append(w.sampled, found...)
	w.mu.Unlock()
}

// checkTagSet checks one tag set against the tag additions recorded.
func (w *cacheWorld) checkTagSet(ctx context.Context, a *redis.Client, k, tag string) []string {
	before := w.now()
	beforeWall := time.Now()
	members, err := a.ZRangeWithScores(ctx, k, 0, -1).Result()
	if err != nil {
		return nil
	}
	const slack = 50 * time.Millisecond
	longest := slices.Max(checkTTLs)
	var latestAdd time.Duration = -1 // the latest start of an addition that returned before the read began
	w.mu.Lock()
	adds := w.tagAdds[tag]
	if i := sort.Search(len(adds), func(i int) bool { return adds[i].end >= before }); i > 0 {
		latestAdd = adds[i-1].latestStart
	}
	w.mu.Unlock()
	var bad []string
	for _, m := range members {
		key, _ := m.Member.(string)
		expires := time.UnixMicro(int64(m.Score * 1000))
		if expires.After(time.Now().Add(longest + slack)) {
			bad = append(bad, fmt.Sprintf("tag set %s: %s scored %v ahead, beyond any TTL", tag, key, time.Until(expires)))
		}
		if latestAdd >= 0 && expires.Before(beforeWall.Add(latestAdd-before-slack)) {
			bad = append(bad, fmt.Sprintf("tag set %s: %s expired %v before the set's last addition, which prunes it",
				tag, key, beforeWall.Add(latestAdd-before).Sub(expires)))
		}
	}
	return bad
}

// snapshot returns the live entries of the layer (key to value) at now.
func (l *localLayer) snapshot(now time.Time) map[string][]byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string][]byte, len(l.items))
	for k, el := range l.items {
		if e := entry(el); now.Before(e.expires) {
			out[k] = e.value
		}
	}
	return out
}

// proofAfter reports whether the subscription has proven itself after t:
// every message published before t has been applied.
func (b *broadcaster) proofAfter(t time.Time) bool {
	return b.base.Add(time.Duration(b.proof.Load())).After(t)
}

// check waits for quiescence and returns every violation of invariants 1
// to 4 (the sampler's included), then logs what the run did.
func (w *cacheWorld) check() []string {
	var violations []string
	stopped := w.began.Add(w.stoppedAt)
	deadline := time.Now().Add(15 * time.Second)
	for _, p := range w.procs {
		for !p.cur.Load().cache.bcast.proofAfter(stopped) {
			if time.Now().After(deadline) {
				violations = append(violations, "a subscription never proved itself after the faults healed (15 s)")
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	w.waitClusterOK()
	quiet := w.now()
	violations = append(violations, w.checkQuiescence()...)
	w.sample()
	w.mu.Lock()
	defer w.mu.Unlock()
	violations = append(violations, w.sampled...)
	stale, lag := w.checkReads(&violations)
	ok := map[string]int{}
	failed := map[string]int{}
	for _, wr := range w.writes {
		if wr.ok {
			ok[wr.kind]++
		} else {
			failed[wr.kind]++
		}
	}
	var faults []string
	w.faults.Range(func(k, v any) bool {
		faults = append(faults, fmt.Sprintf("%s %d", k, v.(*atomic.Int64).Load()))
		return true
	})
	sort.Strings(faults)
	w.t.Logf("%s seed %d: %v of operations: %d reads with a value, %d misses, %d read errors; writes ok %v, failed %v; "+
		"%d cross-process reads older than a write that returned less than the trust window (%v) before, longest lag %v; "+
		"faults: %s; %d tag-set samples; quiescent %v after the last operation",
		w.mode, w.seed, w.stoppedAt.Round(time.Millisecond), len(w.reads), w.misses, w.readErrors, ok, failed,
		stale, w.window, lag.Round(time.Millisecond), strings.Join(faults, ", "), w.samples, (quiet - w.stoppedAt).Round(time.Millisecond))
	return violations
}

// waitClusterOK waits (at most 15 s) until every Cluster node reports the
// cluster ok again: a master restarted near the end may still be joining.
func (w *cacheWorld) waitClusterOK() {
	if w.mode != "cluster" {
		return
	}
	deadline := time.Now().Add(15 * time.Second)
	for _, a := range w.admin {
		for time.Now().Before(deadline) {
			if info, err := a.ClusterInfo(context.Background()).Result(); err == nil && strings.Contains(info, "cluster_state:ok") {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// checkQuiescence compares every first layer with Redis (invariant 3).
func (w *cacheWorld) checkQuiescence() []string {
	ctx := context.Background()
	inRedis := map[string]int64{}                            // full key -> value id; absent or a lease: missing
	probe, err := New(w.direct, Config{KeyPrefix: w.prefix}) // reads past the proxies; no first layer
	if err != nil {
		return []string{err.Error()}
	}
	for i := range checkKeys {
		full := probe.valueKey(fmt.Sprint("k", i))
		v, _, found, err := probe.read(ctx, full)
		if err != nil {
			return []string{fmt.Sprintf("quiescence: reading %s: %v", full, err)}
		}
		if found {
			id, err := decode(v)
			if err != nil {
				return []string{err.Error()}
			}
			inRedis[full] = id
		}
	}
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	var bad []string
	for pi, p := range w.procs {
		c := p.cur.Load().cache
		for full, v := range c.local.snapshot(now) {
			held, err := decode(v)
			if err != nil {
				bad = append(bad, err.Error())
				continue
			}
			redisID, present := inRedis[full]
			if present && redisID == held {
				continue
			}
			if why := w.explainDifference(held, redisID, present); why == "" {
				bad = append(bad, fmt.Sprintf("quiescence: process %d (incarnation %d)'s first layer holds value %d of %s, Redis holds %v\n%s",
					pi, p.cur.Load().id, held, full, map[bool]any{true: redisID, false: "nothing"}[present], w.history(held)))
			}
		}
	}
	return bad
}

// history is what the run did to value id's key: the value, the writes
// that could have touched it and the reads that returned it (w.mu held),
// so that a violation can be explained from the log alone.
func (w *cacheWorld) history(id int64) string {
	h := w.values[id]
	var b strings.Builder
	fmt.Fprintf(&b, "  value %d of %s, tags %v, ttl %v: write began %v, returned nil at %v (never: %v)\n", id, h.key, h.tags, h.ttl, h.from, h.asOf, h.asOf == never)
	for _, wr := range w.writes {
		if wr.key == h.key || !wr.ok || (wr.kind == "invalidate" && wr.end >= h.from) {
			fmt.Fprintf(&b, "  %s %s %v by incarnation %d: %v-%v ok %v\n", wr.kind, wr.key, wr.tags, wr.proc, wr.start, wr.end, wr.ok)
		}
	}
	for _, r := range w.reads {
		if r.value == id {
			fmt.Fprintf(&b, "  %s by incarnation %d: %v-%v\n", r.op, r.proc, r.start, r.end)
		}
	}
	fmt.Fprintf(&b, "  faults %v, stalls %v, stopped at %v", w.faultLog, w.stalls, w.stoppedAt)
	return b.String()
}

// explainDifference names what allows a first layer to hold value held
// while Redis holds redisID (present) or nothing; "" if nothing does.
func (w *cacheWorld) explainDifference(held, redisID int64, present bool) string {
	h := w.values[held]
	if present {
		switch r := w.values[redisID]; {
		case r.asOf == never:
			return "Redis holds a value whose write returned an error (it may have landed late, unannounced)"
		case !r.loaded:
			return "" // a Set tells the other processes: they drop what they held
		}
		// A load tells nobody (the key held no value): if held was lost
		// unannounced, Redis may hold a value loaded since.
	}
	for _, at := range w.restarts {
		if at > h.from {
			return "a restart lost it"
		}
	}
	for _, wr := range w.writes {
		if wr.ok || w.mayLandUntil(wr) < h.from {
			continue
		}
		if (wr.kind != "invalidate" && wr.key == h.key) || (wr.kind == "invalidate" && w.mayList(wr.tags, h.key, wr.end)) {
			return "a write that returned an error may have deleted it, unannounced"
		}
	}
	return ""
}

// mayList reports whether one of tags's sets may have listed key before
// at, so that an invalidation of them deleted key whatever its value then,
// even one stored without those tags: cache.md says "A tag set lists a key
// for as long as its value lives (scored by the value's expiry)", the
// value that was tagged, not the key's latest one, so a key set again
// without a tag stays in that tag's set. A failed invalidation may thus
// delete a value of none of its tags without telling the other processes
// ("the other processes are told if Redis still answers; if they are not,
// their copies can last up to Local.TTL"), which rule 3 excepts ("except
// where a write that returned an error ... explains the difference").
// Every Set or load of key with one of tags counts, failed or not (either
// may have added key: a load adds it before its loader runs), whether or
// not its membership had expired by at: this may over-explain a little,
// never under-explain. w.mu is held.
func (w *cacheWorld) mayList(tags []string, key string, at time.Duration) bool {
	for _, v := range w.values {
		if v.key == key && v.from < at && intersects(v.tags, tags) {
			return true
		}
	}
	return false
}

func intersects(a, b []string) bool {
	for _, x := range a {
		if slices.Contains(b, x) {
			return true
		}
	}
	return false
}

// coverage is, for one key or one tag, the successful writes that cover
// its values, sorted by end, with the latest start among each prefix.
type coverage struct {
	ends, maxStart []time.Duration
	all            []writeRec
}

func newCoverage(ws []writeRec) *coverage {
	sort.Slice(ws, func(i, j int) bool { return ws[i].end < ws[j].end })
	c := &coverage{all: ws}
	var m time.Duration = -1
	for _, wr := range ws {
		m = max(m, wr.start)
		c.ends = append(c.ends, wr.end)
		c.maxStart = append(c.maxStart, m)
	}
	return c
}

// latestStart is the latest start among writes that returned before t.
func (c *coverage) latestStart(t time.Duration) time.Duration {
	if c == nil {
		return -1
	}
	i := sort.Search(len(c.ends), func(i int) bool { return c.ends[i] >= t })
	if i == 0 {
		return -1
	}
	return c.maxStart[i-1]
}

// checkReads checks invariants 1 and 2 over every read; it returns how
// many cross-process reads were older than a write that returned within
// the trust window before them, and the longest such lag. w.mu is held.
func (w *cacheWorld) checkReads(violations *[]string) (int, time.Duration) {
	ownKey, ownTag := map[string][]writeRec{}, map[string][]writeRec{}
	anyKey, anyTag := map[string][]writeRec{}, map[string][]writeRec{}
	for _, wr := range w.writes {
		if !wr.ok {
			continue
		}
		if wr.kind == "invalidate" {
			for _, tag := range wr.tags {
				ownTag[fmt.Sprint(wr.proc, tag)] = append(ownTag[fmt.Sprint(wr.proc, tag)], wr)
				anyTag[tag] = append(anyTag[tag], wr)
			}
			continue
		}
		ownKey[fmt.Sprint(wr.proc, wr.key)] = append(ownKey[fmt.Sprint(wr.proc, wr.key)], wr)
		anyKey[wr.key] = append(anyKey[wr.key], wr)
	}
	cov := func(m map[string][]writeRec) map[string]*coverage {
		out := map[string]*coverage{}
		for k, ws := range m {
			out[k] = newCoverage(ws)
		}
		return out
	}
	ownKeyC, ownTagC, anyKeyC, anyTagC := cov(ownKey), cov(ownTag), cov(anyKey), cov(anyTag)
	restartedIn := func(from, to time.Duration) bool {
		for _, at := range w.restarts {
			if at >= from && at <= to {
				return true
			}
		}
		return false
	}
	stale := 0
	var lag time.Duration
	report := func(r readRec, v *valueRec, whose string, cutoff time.Duration, own bool) {
		var by []string
		for _, wr := range w.writes {
			if wr.ok && wr.end < cutoff && wr.start > v.asOf && (!own || wr.proc == r.proc) &&
				((wr.kind != "invalidate" && wr.key == v.key) || (wr.kind == "invalidate" && intersects(wr.tags, v.tags))) {
				by = append(by, fmt.Sprintf("%s %s%v by %d [%v, %v]", wr.kind, wr.key, wr.tags, wr.proc, wr.start.Round(time.Microsecond), wr.end.Round(time.Microsecond)))
			}
		}
		msg := fmt.Sprintf("%s: process %d's %s [%v, %v] returned value %d of %s%v (from %v, written %v), older than: %s",
			whose, r.proc, r.op, r.start.Round(time.Microsecond), r.end.Round(time.Microsecond), r.value, r.key, v.tags,
			v.from.Round(time.Microsecond), v.asOf.Round(time.Microsecond), strings.Join(by[:min(len(by), 3)], "; "))
		if len(*violations) == 0 {
			msg += "\n" + w.timeline(r, v)
		}
		*violations = append(*violations, msg)
	}
	for _, r := range w.reads {
		v := w.values[r.value]
		if v.asOf == never {
			continue
		}
		tagsToo := !restartedIn(v.from, r.start)
		latest := func(keyC, tagC map[string]*coverage, prefix string, cutoff time.Duration) time.Duration {
			l := keyC[prefix+v.key].latestStart(cutoff)
			if tagsToo {
				for _, tag := range v.tags {
					l = max(l, tagC[prefix+tag].latestStart(cutoff))
				}
			}
			return l
		}
		own := fmt.Sprint(r.proc)
		if latest(ownKeyC, ownTagC, own, r.start) > v.asOf {
			report(r, v, "invariant 1 (own write)", r.start, true)
			continue
		}
		if latest(anyKeyC, anyTagC, "", r.start-w.window) > v.asOf {
			report(r, v, "invariant 2 (another process's write, beyond the trust window)", r.start-w.window, false)
			continue
		}
		if latest(anyKeyC, anyTagC, "", r.start) > v.asOf {
			stale++
			lag = max(lag, r.start-w.firstCover(anyKeyC, anyTagC, v, r.start, tagsToo))
		}
	}
	return stale, lag
}

// timeline lists what happened to the key of r around it, for the first
// violation's report. w.mu is held.
func (w *cacheWorld) timeline(r readRec, v *valueRec) string {
	from, to := v.from-20*time.Millisecond, r.end+5*time.Millisecond
	type line struct {
		at   time.Duration
		text string
	}
	var lines []line
	for _, wr := range w.writes {
		if wr.start <= to && wr.end >= from && (wr.key == v.key || intersects(wr.tags, v.tags) && wr.kind == "invalidate") {
			lines = append(lines, line{wr.start, fmt.Sprintf("  %v-%v process %d %s %s%v ok=%v", wr.start.Round(time.Microsecond), wr.end.Round(time.Microsecond), wr.proc, wr.kind, wr.key, wr.tags, wr.ok)})
		}
	}
	for id, val := range w.values {
		if val.key == v.key && val.from <= to && val.from >= from {
			lines = append(lines, line{val.from, fmt.Sprintf("  %v value %d%v as of %v", val.from.Round(time.Microsecond), id, val.tags, val.asOf.Round(time.Microsecond))})
		}
	}
	for _, rr := range w.reads {
		if rr.key == v.key && rr.start <= to && rr.end >= from {
			lines = append(lines, line{rr.start, fmt.Sprintf("  %v-%v process %d %s -> %d", rr.start.Round(time.Microsecond), rr.end.Round(time.Microsecond), rr.proc, rr.op, rr.value)})
		}
	}
	for _, at := range w.restarts {
		if at >= from && at <= to {
			lines = append(lines, line{at, fmt.Sprintf("  %v restart", at.Round(time.Microsecond))})
		}
	}
	sort.Slice(lines, func(i, j int) bool { return lines[i].at < lines[j].at })
	var b strings.Builder
	for _, l := range lines {
		b.WriteString(l.text + "\n")
	}
	return b.String()
}

// firstCover is the earliest end, before t, of a write that makes v older
// (one within the trust window: an earlier one would be a violation).
func (w *cacheWorld) firstCover(keyC, tagC map[string]*coverage, v *valueRec, t time.Duration, tagsToo bool) time.Duration {
	first := t
	scan := func(c *coverage) {
		if c == nil {
			return
		}
		from := sort.Search(len(c.ends), func(i int) bool { return c.ends[i] >= t-w.window })
		to := sort.Search(len(c.ends), func(i int) bool { return c.ends[i] >= t })
		for _, wr := range c.all[from:to] {
			if wr.start > v.asOf {
				first = min(first, wr.end)
			}
		}
	}
	scan(keyC[v.key])
	if tagsToo {
		for _, tag := range v.tags {
			scan(tagC[tag])
		}
	}
	return first
}
