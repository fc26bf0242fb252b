package ratelimitfx

// The rate-limit checker: a randomized, fault-injecting test against real
// Redis (a private server, and a 3-master Cluster) that states the
// limiter's promise as invariants and hunts for violations.
//
// Three "processes" (each its own Redis client, through a proxy of its
// own, with a fixed-window and a sliding-log limiter on one key prefix;
// some fail-open, some fail-closed) check requests concurrently: Check
// with a few rules × keys, and requests through chi middleware in a
// r.Route group and on a r.With route. Rules are drawn from the seed so
// that some share a name but not a limit or a window. Meanwhile faults
// hit the processes' connections and Redis: freezes, blackholes and cuts
// (of a process, or of one connection), refused dials, CLIENT PAUSE,
// DEBUG SLEEP, SCRIPT FLUSH and restarts without persistence. (The
// limiter has no pub/sub connection to kill.)
//
// Every check is bracketed by Redis's own clock: TIME just before and
// just after, so each script ran at a Redis time within [start, end]. A
// recorder on each client keeps the counter each script touched and
// Redis's reply. Then:
//
//  1. Distinct rules never share a counter, and one rule keeps one counter
//     for a key in every process: each counter key belongs to exactly one
//     (algorithm, rule, key), and each of those has one counter key. A rule
//     is distinct if its name (or route), limit, window or algorithm is.
//  2. The caller is told what Redis decided: an answer of "allowed" or
//     "refused" has a script reply saying so, and an answer with no reply
//     is a store error (a fail-open pass, or a fail-closed 503/error).
//  3. Fixed window: each reply's window contains the script's time, which
//     lies within the check's bracket; a counter's windows never overlap
//     (starts at least Window apart); no window allows more than Limit.
//  4. Sliding log: no Limit+1 allowed checks of a counter fall within an
//     interval shorter than Window — judged by their brackets, so only
//     what certainly happened counts as a violation.
//  5. Afterwards no counter is left without an expiry.
//
// 3 and 4 hold between restarts: a restart that loses the counters starts
// each afresh (an epoch); a window that spans one may allow Limit more per
// restart. Fail-open passes are outside the promise and only counted.
//
// REDISFX_CHECK_DURATION sets how long each seed runs (default 3s; make
// chaos runs it longer); REDISFX_CHECK_SEED replays one seed. A failure
// prints the seed and the command that replays it. The schedule of
// operations and faults is the seed's; the timing of a real Redis and of
// the Go scheduler is not, so a replay re-creates the same storm, not the
// same interleaving.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/redisfx/redisfx/internal/faultproxy"
	"github.com/redisfx/redisfx/internal/idemcheck"
	"github.com/redisfx/redisfx/internal/redistest"
	"github.com/redisfx/redisfx/storefx"
)

// rateLimitCheckerSeeds are seeds that once found a violation; they run
// every time, before a fresh one.
var rateLimitCheckerSeeds = map[string][]uint64{
	// A fixed window's PEXPIREAT deleted the counter it was counting in,
	// in the window's last millisecond (TestFixedWindow_LastMillisecond…).
	"standalone": {1795395873474328652, 1795396871082704265},
	"cluster":    {},
}

func TestRateLimitChecker(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"standalone", "cluster"} {
		t.Run(mode, func(t *testing.T) {
			if mode == "cluster" && testing.Short() {
				t.Skip("-short: the Cluster variant is skipped")
			}
			t.Parallel()
			duration := idemcheck.Duration(t, 3*time.Second)
			for _, seed := range idemcheck.Seeds(t, rateLimitCheckerSeeds[mode]) {
				t.Run(fmt.Sprint(seed), func(t *testing.T) {
					w := newCheckWorld(t, mode, seed)
					w.run(duration)
					violations := w.check()
					w.report()
					if len(violations) > 0 {
						for _, v := range violations[:min(len(violations), 20)] {
							t.Error(v)
						}
						t.Errorf("%d violations; replay with:\n  REDISFX_CHECK_SEED=%d REDISFX_CHECK_DURATION=%v go test -race -count=1 -run 'TestRateLimitChecker/%s$' -v ./ratelimitfx",
							len(violations), seed, duration, mode)
					}
				})
			}
		})
	}
}

const (
	checkProcs       = 3
	checkWorkers     = 6
	checkStoreTimout = 300 * time.Millisecond
)

var checkAlgorithms = []Algorithm{FixedWindow, SlidingLog}

// outcome is what the caller of a check was told.
type outcome int

const (
	allowed outcome = iota
	refused
	failed // a store error: a fail-open pass, or a fail-closed refusal
)

// checkOp is one check as the checker saw it.
type checkOp struct {
	proc   int
	policy ErrorPolicy
	alg    Algorithm
	rule   string // the rule's identity: the checker's own, not the limiter's
	limit  int64
	window int64 // ms
	key    string
	epoch  int64
	start  int64 // Redis ms just before the check
	end    int64 // Redis ms just after
	told   outcome
	odd    string // an answer the caller should never get

	// Set by the recorder, on the goroutine that runs the check.
	counters []string // KEYS[1] of each script call
	reply    []int64  // the last successful script reply
}

// counterOf is the identity of a rule's counter for one key.
func (o *checkOp) counterOf() string { return string(o.alg) + " " + o.rule + " | key " + o.key }

type opKey struct{}

// recorder is a go-redis hook that notes, for the check in the command's
// context, the counter each script touched and Redis's reply.
type recorder struct{}

func (recorder) DialHook(next redis.DialHook) redis.DialHook { return next }
func (recorder) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (recorder) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		op, ok := ctx.Value(opKey{}).(*checkOp)
		if name := cmd.Name(); !ok || (name != "evalsha" && name != "eval") {
			return err
		}
		if args := cmd.Args(); len(args) > 3 {
			op.counters = append(op.counters, fmt.Sprint(args[3]))
		}
		if c, isCmd := cmd.(*redis.Cmd); isCmd && err == nil {
			if res, rerr := c.Int64Slice(); rerr == nil {
				op.reply = res
			}
		}
		return err
	}
}

// checkRule is a rule the processes check programmatically.
type checkRule struct {
	id   string
	rule Rule
}

// checkRoute is a route the processes' routers limit.
type checkRoute struct {
	pattern string // as a request names it
	path    func(rng *rand.Rand) string
	group   bool // limited by r.Use in the r.Route group, else by r.With
}

type checkProc struct {
	id       int
	policy   ErrorPolicy
	proxies  []*faultproxy.Proxy
	limiters map[Algorithm]*Limiter
	routers  map[Algorithm]http.Handler
}

type checkWorld struct {
	t      *testing.T
	mode   string
	seed   uint64
	rng    *rand.Rand // the fault schedule; the test goroutine's alone
	prefix string
	nodes  []*redistest.Server
	admin  []*redis.Client // direct, one per node: faults and the final scan
	clock  *redis.Client   // direct: Redis's time for the brackets

	rules     []checkRule
	groupRule Rule
	withRule  Rule
	routes    []checkRoute
	keys      []string
	ips       []string
	procs     []*checkProc

	// Each check holds restart for reading; a restart takes it for writing,
	// so that no check straddles one, and moves to the next epoch.
	restart sync.RWMutex
	epoch   atomic.Int64

	mu       sync.Mutex
	ops      []*checkOp
	faults   map[string]int
	restarts []int64 // Redis ms just after each restart: epoch i began at restarts[i-1]
	faultLog []faultEvent
}

func newCheckWorld(t *testing.T, mode string, seed uint64) *checkWorld {
	w := &checkWorld{t: t, mode: mode, seed: seed, rng: rand.New(rand.NewPCG(seed, 0x7a7e)), prefix: redistest.Prefix(t),
		faults: map[string]int{}, keys: []string{"k0", "k:1", "{k2}"}, ips: []string{"203.0.113.7", "2001:db8::9"}}
	switch mode {
	case "standalone":
		w.nodes = []*redistest.Server{redistest.StartPrivate(t)}
	case "cluster":
		w.nodes = redistest.StartCluster(t, 3, 0).Nodes
	}
	for _, n := range w.nodes {
		w.admin = append(w.admin, n.Client())
	}
	w.clock = w.nodes[0].Client()
	w.drawRules()
	for i := range checkProcs {
		w.procs = append(w.procs, w.newProc(i))
	}
	return w
}

// drawRules draws the seed's rules: two unnamed ones and two named alike,
// each pair differing in limit or window, so that a limiter that names
// counters after the name alone makes them share.
func (w *checkWorld) drawRules() {
	windows := []time.Duration{150 * time.Millisecond, 200 * time.Millisecond, 300 * time.Millisecond,
		500 * time.Millisecond, 800 * time.Millisecond, 1200 * time.Millisecond}
	draw := func(name string) Rule {
		return Rule{Name: name, Limit: int64(1 + w.rng.IntN(8)), Window: windows[w.rng.IntN(len(windows))]}
	}
	pair := func(name string) (Rule, Rule) {
		a, b := draw(name), draw(name)
		for a.Limit == b.Limit && a.Window == b.Window {
			b = draw(name)
		}
		return a, b
	}
	a, b := pair("")
	c, d := pair("api")
	for i, r := range []Rule{a, b, c, d} {
		w.rules = append(w.rules, checkRule{id: fmt.Sprintf("check#%d %q %d/%v", i, r.Name, r.Limit, r.Window), rule: r})
	}
	w.groupRule, w.withRule = draw(""), draw("")
	w.routes = []checkRoute{
		{pattern: "GET /g/a", group: true, path: func(*rand.Rand) string { return "/g/a" }},
		{pattern: "GET /g/b", group: true, path: func(*rand.Rand) string { return "/g/b" }},
		{pattern: "GET /g/items/{id}", group: true, path: func(rng *rand.Rand) string { return "/g/items/" + strconv.Itoa(rng.IntN(1000)) }},
		{pattern: "GET /w", path: func(*rand.Rand) string { return "/w" }},
	}
}

// newProc is one process: its own client, through its own proxies, with a
// limiter per algorithm and a router for each.
func (w *checkWorld) newProc(id int) *checkProc {
	p := &checkProc{id: id, policy: []ErrorPolicy{FailOpen, FailClosed}[w.rng.IntN(2)],
		limiters: map[Algorithm]*Limiter{}, routers: map[Algorithm]http.Handler{}}
	switch id { // at least one of each
	case 0:
		p.policy = FailClosed
	case 1:
		p.policy = FailOpen
	}
	dialMap := map[string]string{}
	for _, n := range w.nodes {
		px := faultproxy.Start(w.t, n.Addr())
		p.proxies = append(p.proxies, px)
		dialMap[n.Addr()] = px.Addr()
	}
	var rdb redis.UniversalClient
	if w.mode == "standalone" {
		// What an application gets from storefx, pointed at the proxy.
		c, err := storefx.New(fmt.Sprint("proc", id), storefx.Config{URL: "redis://" + p.proxies[0].Addr()})
		if err != nil {
			w.t.Fatal(err)
		}
		rdb = c
	} else {
		// storefx's Cluster options, with a dialer that maps each node
		// (as the nodes name themselves) to the proxy in front of it.
		rdb = redis.NewClusterClient(&redis.ClusterOptions{Addrs: slices.Collect(mapKeys(dialMap)),
			Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
				if px, ok := dialMap[addr]; ok {
					addr = px
				}
				var d net.Dialer
				return d.DialContext(ctx, network, addr)
			},
			ContextTimeoutEnabled: true, DisableIdentity: true, ClusterStateReloadInterval: 2 * time.Second,
			MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}})
	}
	rdb.AddHook(recorder{})
	w.t.Cleanup(func() { _ = rdb.Close() })
	ok := func(http.ResponseWriter, *http.Request) {}
	for _, alg := range checkAlgorithms {
		l, err := New(rdb, Config{KeyPrefix: w.prefix, Algorithm: alg, ErrorPolicy: p.policy, StoreTimeout: checkStoreTimout})
		if err != nil {
			w.t.Fatal(err)
		}
		p.limiters[alg] = l
		r := chi.NewRouter()
		r.Route("/g", func(r chi.Router) {
			r.Use(l.Limit(w.groupRule))
			r.Get("/a", ok)
			r.Get("/b", ok)
			r.Get("/items/{id}", ok)
		})
		r.With(l.Limit(w.withRule)).Get("/w", ok)
		p.routers[alg] = r
	}
	return p
}

func mapKeys(m map[string]string) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// redisNow is Redis's time in ms (TIME, floored as the scripts floor it).
// Every node runs on this machine's clock, so any node's TIME is Redis's
// time; it waits out a pause.
func (w *checkWorld) redisNow() (int64, bool) {
	for range 100 {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		now, err := w.clock.Time(ctx).Result()
		cancel()
		if err == nil {
			return now.UnixMilli(), true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return 0, false
}

// run checks with workers while the test goroutine injects faults.
func (w *checkWorld) run(d time.Duration) {
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	for i := range checkWorkers {
		rng := rand.New(rand.NewPCG(w.seed, uint64(i)+1))
		wg.Go(func() {
			for time.Now().Before(deadline) {
				w.checkOnce(rng)
				if rng.IntN(4) == 0 {
					time.Sleep(time.Duration(rng.IntN(20)) * time.Millisecond) // vary the pace: bursts and gaps
				}
			}
		})
	}
	for time.Now().Before(deadline) {
		w.fault()
		time.Sleep(time.Duration(50+w.rng.IntN(250)) * time.Millisecond) // a fault's spacing is part of the schedule
	}
	w.heal()
	wg.Wait()
}

// checkOnce makes one check, programmatic or through the middleware, and
// records it.
func (w *checkWorld) checkOnce(rng *rand.Rand) {
	p := w.procs[rng.IntN(len(w.procs))]
	alg := checkAlgorithms[rng.IntN(len(checkAlgorithms))]
	op := &checkOp{proc: p.id, policy: p.policy, alg: alg}
	ctx := context.WithValue(context.Background(), opKey{}, op)
	var do func()
	if rng.IntN(10) < 7 {
		r := w.rules[rng.IntN(len(w.rules))]
		op.rule, op.limit, op.window, op.key = r.id, r.rule.Limit, r.rule.Window.Milliseconds(), w.keys[rng.IntN(len(w.keys))]
		do = func() {
			d, err := p.limiters[alg].Check(ctx, r.rule, op.key)
			var unavailable *StoreUnavailableError
			switch {
			case err == nil && d.Allowed:
				op.told = allowed
			case err == nil:
				op.told = refused
			case errors.As(err, &unavailable) && d.Allowed == (p.policy == FailOpen):
				op.told = failed
			default:
				op.told, op.odd = failed, fmt.Sprintf("Check gave %+v, %v", d, err)
			}
		}
	} else {
		route := w.routes[rng.IntN(len(w.routes))]
		rule := w.withRule
		if route.group {
			rule = w.groupRule
		}
		ip := w.ips[rng.IntN(len(w.ips))]
		op.rule, op.limit, op.window, op.key = "http "+route.pattern, rule.Limit, rule.Window.Milliseconds(), "ip:"+ip
		req := httptest.NewRequestWithContext(ctx, http.MethodGet, route.path(rng), nil)
		req.RemoteAddr = net.JoinHostPort(ip, "4444")
		do = func() {
			rec := httptest.NewRecorder()
			p.routers[alg].ServeHTTP(rec, req)
			switch {
			case rec.Code == http.StatusOK && rec.Header().Get("RateLimit") != "":
				op.told = allowed
			case rec.Code == http.StatusTooManyRequests:
				op.told = refused
			case rec.Code == http.StatusOK && p.policy == FailOpen, rec.Code == http.StatusServiceUnavailable && p.policy == FailClosed:
				op.told = failed
			default:
				op.told, op.odd = failed, fmt.Sprintf("answer %d %v under %s", rec.Code, rec.Header(), p.policy)
			}
		}
	}
	w.restart.RLock()
	defer w.restart.RUnlock()
	op.epoch = w.epoch.Load()
	var ok bool
	if op.start, ok = w.redisNow(); !ok {
		return
	}
	do()
	if op.end, ok = w.redisNow(); !ok {
		return
	}
	w.mu.Lock()
	w.ops = append(w.ops, op)
	w.mu.Unlock()
}

// faultEvent is a fault as a violation's report names it.
type faultEvent struct {
	kind       string
	proc, node int
	from, to   int64 // Redis ms
}

// faultsBetween lists the faults that overlapped [from, to].
func (w *checkWorld) faultsBetween(from, to int64) []string {
	var out []string
	for _, f := range w.faultLog {
		if f.to >= from && f.from <= to {
			out = append(out, fmt.Sprintf("%s(proc %d, node %d) %d..%d", f.kind, f.proc, f.node, f.from, f.to))
		}
	}
	return out
}

// fault injects one fault drawn from the schedule, and waits it out.
func (w *checkWorld) fault() {
	ctx := context.Background()
	p := w.procs[w.rng.IntN(len(w.procs))]
	node := w.rng.IntN(len(w.nodes))
	d := time.Duration(50+w.rng.IntN(550)) * time.Millisecond
	kinds := []string{"freeze", "freeze-one", "blackhole", "cut", "cut-one", "refuse", "pause", "debug-sleep", "script-flush", "restart"}
	kind := kinds[w.rng.IntN(len(kinds))]
	w.faults[kind]++
	ev := faultEvent{kind: kind, proc: p.id, node: node}
	ev.from, _ = w.redisNow()
	defer func() {
		ev.to, _ = w.redisNow()
		w.faultLog = append(w.faultLog, ev)
	}()
	switch kind {
	case "freeze", "blackhole":
		mode := faultproxy.Freeze
		if kind == "blackhole" {
			mode = faultproxy.Blackhole
		}
		for _, px := range p.proxies {
			px.SetMode(mode)
		}
		time.Sleep(d) // the fault's duration
		for _, px := range p.proxies {
			px.SetMode(faultproxy.Forward)
		}
	case "freeze-one":
		if conns := p.proxies[node].Conns(); len(conns) > 0 {
			c := conns[w.rng.IntN(len(conns))]
			c.SetMode(faultproxy.Freeze)
			time.Sleep(d) // the fault's duration
			c.SetMode(faultproxy.Forward)
		}
	case "cut":
		for _, px := range p.proxies {
			px.CutAll()
		}
	case "cut-one":
		if conns := p.proxies[node].Conns(); len(conns) > 0 {
			conns[w.rng.IntN(len(conns))].Cut()
		}
	case "refuse": // the process cannot reach Redis for a while; nothing is lost
		for _, px := range p.proxies {
			px.Refuse(true)
			px.CutAll()
		}
		time.Sleep(d) // the fault's duration
		for _, px := range p.proxies {
			px.Refuse(false)
		}
	case "pause":
		if err := w.admin[node].Do(ctx, "CLIENT", "PAUSE", d.Milliseconds(), "ALL").Err(); err != nil {
			w.t.Errorf("CLIENT PAUSE: %v", err)
		}
		time.Sleep(d) // the fault's duration
	case "debug-sleep":
		_ = w.admin[node].Do(ctx, "DEBUG", "SLEEP", fmt.Sprintf("%.3f", d.Seconds())).Err() // returns when the server wakes
	case "script-flush":
		for _, a := range w.admin {
			if err := a.ScriptFlush(ctx).Err(); err != nil {
				w.t.Errorf("SCRIPT FLUSH: %v", err)
			}
		}
	case "restart":
		w.restartNode(node)
	}
}

// restartNode restarts a node without persistence while no check is in
// flight, and starts the next epoch.
func (w *checkWorld) restartNode(node int) {
	w.restart.Lock()
	defer w.restart.Unlock()
	w.nodes[node].Restart()
	w.epoch.Add(1)
	if now, ok := w.redisNow(); ok {
		w.restarts = append(w.restarts, now)
	}
	if w.mode == "cluster" {
		w.awaitClusterOK(node)
	}
}

// awaitClusterOK waits until a restarted node serves its slots again.
func (w *checkWorld) awaitClusterOK(node int) {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		info, err := w.admin[node].ClusterInfo(context.Background()).Result()
		if err == nil && strings.Contains(info, "cluster_state:ok") {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	w.t.Fatalf("node %d: the Cluster is not ok 10s after its restart", node)
}

// heal ends every fault.
func (w *checkWorld) heal() {
	for _, p := range w.procs {
		for _, px := range p.proxies {
			px.SetMode(faultproxy.Forward)
			px.Refuse(false)
		}
	}
	for _, a := range w.admin {
		_ = a.Do(context.Background(), "CLIENT", "UNPAUSE").Err()
	}
}

// check judges the recorded checks against the invariants and returns the
// violations.
func (w *checkWorld) check() []string {
	var v []string
	// 1. Counters: one per (algorithm, rule, key), never shared.
	countersOf := map[string]map[string]bool{}
	ownersOf := map[string]map[string]bool{}
	for _, op := range w.ops {
		for _, c := range op.counters {
			addTo(countersOf, op.counterOf(), c)
			addTo(ownersOf, c, op.counterOf())
		}
	}
	for owner, cs := range countersOf {
		if len(cs) > 1 {
			v = append(v, fmt.Sprintf("1: %s was counted in %d counters %q: processes do not share it", owner, len(cs), sortedKeys(cs)))
		}
	}
	for c, owners := range ownersOf {
		if len(owners) > 1 {
			v = append(v, fmt.Sprintf("1: counter %q is shared by distinct rules %q", c, sortedKeys(owners)))
		}
	}
	// 2. The caller is told what Redis decided.
	groups := map[string][]*checkOp{}
	for _, op := range w.ops {
		if op.odd != "" {
			v = append(v, fmt.Sprintf("2: %s (%s): %s", op.counterOf(), op.policy, op.odd))
		}
		decided, ok := redisDecision(op)
		switch {
		case !ok && op.told != failed:
			v = append(v, fmt.Sprintf("2: %s told %v without a script reply", op.counterOf(), op.told))
		case ok && op.told != decided:
			v = append(v, fmt.Sprintf("2: %s told %v, Redis replied %v (%v)", op.counterOf(), op.told, op.reply, decided))
		}
		if ok {
			// The script's clock reading lies within the check's bracket.
			if now := op.reply[2]; now < op.start || now > op.end {
				v = append(v, fmt.Sprintf("2: %s: the script ran at %d, outside the check's bracket [%d, %d]", op.counterOf(), now, op.start, op.end))
			}
			g := fmt.Sprintf("%s | epoch %d", op.counterOf(), op.epoch)
			groups[g] = append(groups[g], op)
		}
	}
	// 3 and 4, per counter and epoch.
	for g, ops := range groups {
		if ops[0].alg == FixedWindow {
			v = append(v, w.checkFixedWindow(g, ops)...)
		} else {
			v = append(v, checkSlidingLog(g, ops)...)
		}
	}
	// 5. Every counter has an expiry.
	v = append(v, w.checkExpiries()...)
	return v
}

// redisDecision is what the script decided for op, if it replied.
func redisDecision(op *checkOp) (outcome, bool) {
	want := 3
	if op.alg == SlidingLog {
		want = 4
	}
	if len(op.reply) != want {
		return 0, false
	}
	if op.alg == SlidingLog && op.reply[3] == 1 || op.alg == FixedWindow && op.reply[0] <= op.limit {
		return allowed, true
	}
	return refused, true
}

// checkFixedWindow: every reply's window [start, start+Window) holds the
// script's time; windows never overlap; at most Limit allowed per window.
func (w *checkWorld) checkFixedWindow(g string, ops []*checkOp) []string {
	var v []string
	window, limit := ops[0].window, ops[0].limit
	allowedIn := map[int64]int64{}
	for _, op := range ops {
		start, now := op.reply[1], op.reply[2]
		if now < start || now >= start+window {
			v = append(v, fmt.Sprintf("3: %s: the script at %d answered from the window starting %d", g, now, start))
		}
		if d, _ := redisDecision(op); d == allowed {
			allowedIn[start]++
		}
	}
	starts := map[int64]bool{}
	for _, op := range ops {
		starts[op.reply[1]] = true
	}
	sorted := slices.Sorted(func(yield func(int64) bool) {
		for s := range starts {
			if !yield(s) {
				return
			}
		}
	})
	for i := 1; i < len(sorted); i++ {
		if sorted[i]-sorted[i-1] < window {
			v = append(v, fmt.Sprintf("3: %s: windows starting %d and %d overlap (window %dms)", g, sorted[i-1], sorted[i], window))
		}
	}
	for start, n := range allowedIn {
		if n > limit {
			var in []string
			for _, op := range ops {
				if d, _ := redisDecision(op); d == allowed && op.reply[1] == start {
					in = append(in, op.String())
				}
			}
			v = append(v, fmt.Sprintf("3: %s: the window starting %d allowed %d, limit %d: %s; faults around it: %v", g, start, n, limit,
				strings.Join(in, "; "), w.faultsBetween(start-2000, start+window+2000)))
		}
	}
	return v
}

// String is the op as a violation names it.
func (o *checkOp) String() string {
	return fmt.Sprintf("[proc %d %s, told %v, bracket %d..%d, reply %v, counters %q]", o.proc, o.policy, o.told, o.start, o.end, o.reply, o.counters)
}

// checkSlidingLog: no Limit+1 allowed checks certainly ran within an
// interval shorter than Window. Checks that certainly ran within [t, t+W)
// are those that began at or after t and ended before t+W; it is enough
// to try t at each check's start.
func checkSlidingLog(g string, ops []*checkOp) []string {
	var ok []*checkOp
	for _, op := range ops {
		if d, _ := redisDecision(op); d == allowed {
			ok = append(ok, op)
		}
	}
	sort.Slice(ok, func(i, j int) bool { return ok[i].start < ok[j].start })
	window, limit := ops[0].window, ops[0].limit
	for i, first := range ok {
		var in []int64
		for _, op := range ok[i:] {
			if op.start >= first.start+window {
				break
			}
			if op.end < first.start+window {
				in = append(in, op.reply[2])
			}
		}
		if int64(len(in)) > limit {
			return []string{fmt.Sprintf("4: %s: %d allowed within %dms of %d (limit %d); the scripts ran at %v", g, len(in), window, first.start, limit, in)}
		}
	}
	return nil
}

// checkExpiries scans every node for counters without an expiry.
func (w *checkWorld) checkExpiries() []string {
	var v []string
	ctx := context.Background()
	for i, a := range w.admin {
		iter := a.Scan(ctx, 0, w.prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			if ttl := a.PTTL(ctx, iter.Val()).Val(); ttl == -1 {
				v = append(v, fmt.Sprintf("5: node %d: counter %q has no expiry", i, iter.Val()))
			}
		}
		if err := iter.Err(); err != nil {
			v = append(v, fmt.Sprintf("5: node %d: SCAN: %v", i, err))
		}
	}
	return v
}

// report logs what the run did, so a long run's figures can be quoted.
func (w *checkWorld) report() {
	var told [3]int
	var http, failOpen int
	atLimit, windows := 0, 0
	for _, op := range w.ops {
		told[op.told]++
		if strings.HasPrefix(op.rule, "http ") {
			http++
		}
		if op.told == failed && op.policy == FailOpen {
			failOpen++
		}
	}
	perWindow := map[string]int64{}
	limitOf := map[string]int64{}
	for _, op := range w.ops {
		if d, ok := redisDecision(op); ok && d == allowed && op.alg == FixedWindow {
			k := fmt.Sprintf("%s | epoch %d | %d", op.counterOf(), op.epoch, op.reply[1])
			perWindow[k]++
			limitOf[k] = op.limit
		}
	}
	for k, n := range perWindow {
		windows++
		if n == limitOf[k] {
			atLimit++
		}
	}
	brackets := make([]int64, 0, len(w.ops))
	for _, op := range w.ops {
		brackets = append(brackets, op.end-op.start)
	}
	slices.Sort(brackets)
	quantile := func(q float64) int64 {
		if len(brackets) == 0 {
			return 0
		}
		return brackets[int(q*float64(len(brackets)-1))]
	}
	w.t.Logf("seed %d: %d checks (%d through the middleware): %d allowed, %d refused, %d store errors (%d fail-open passes); "+
		"%d fixed windows with an allowed check, %d of them filled to the limit; brackets median %dms, p99 %dms, max %dms; %d restarts; faults %v",
		w.seed, len(w.ops), http, told[allowed], told[refused], told[failed], failOpen, windows, atLimit,
		quantile(0.5), quantile(0.99), quantile(1), w.epoch.Load(), w.faults)
}

func addTo(m map[string]map[string]bool, k, v string) {
	if m[k] == nil {
		m[k] = map[string]bool{}
	}
	m[k][v] = true
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func (o outcome) String() string { return [...]string{"allowed", "refused", "failed"}[o] }
