package idempotencyfx

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisfx/redisfx/internal/idemscript"
	"github.com/redisfx/redisfx/internal/redistest"
	"github.com/redisfx/redisfx/storefx"
)

// stormCost is what a burst of duplicates of one in-progress key cost Redis.
type stormCost struct {
	cmds  map[string]int64 // calls per command (scripts' own included), INFO excluded
	total int64
	conns int64           // connections Redis accepted
	cpu   time.Duration   // Redis CPU (user+sys) during the burst, minus as long a time idle
	wake  []time.Duration // each duplicate's answer after the first's handler returned, sorted
	bad   []string        // answers that are not the first's response, replayed
}

func (c stormCost) String() string {
	names := slices.Sorted(func(yield func(string) bool) {
		for k := range c.cmds {
			if !yield(k) {
				return
			}
		}
	})
	var b strings.Builder
	for _, k := range names {
		b.WriteString(" " + k + "=" + strconv.FormatInt(c.cmds[k], 10))
	}
	q := func(p int) time.Duration { return c.wake[min(len(c.wake)*p/100, len(c.wake)-1)] }
	return "commands " + strconv.FormatInt(c.total, 10) + " (" + strings.TrimSpace(b.String()) + "), connections " +
		strconv.FormatInt(c.conns, 10) + ", Redis CPU " + c.cpu.String() + ", wake-up p50 " + q(50).String() +
		" p99 " + q(99).String() + " max " + c.wake[len(c.wake)-1].String()
}

// redisStats reads the command counts, accepted connections and CPU of a server.
func redisStats(tb testing.TB, admin *redis.Client) (cmds map[string]int64, conns int64, cpu time.Duration) {
	tb.Helper()
	info, err := admin.Info(context.Background(), "commandstats", "stats", "cpu").Result()
	if err != nil {
		tb.Fatal(err)
	}
	cmds = map[string]int64{}
	for line := range strings.SplitSeq(info, "\r\n") {
		name, rest, _ := strings.Cut(line, ":")
		switch {
		case strings.HasPrefix(name, "cmdstat_") && name != "cmdstat_info":
			calls, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
			cmds[strings.TrimPrefix(name, "cmdstat_")], _ = strconv.ParseInt(calls, 10, 64)
		case name == "total_connections_received":
			conns, _ = strconv.ParseInt(rest, 10, 64)
		case name == "used_cpu_user" || name == "used_cpu_sys":
			s, _ := strconv.ParseFloat(rest, 64)
			cpu += time.Duration(s * float64(time.Second))
		}
	}
	return cmds, conns, cpu
}

// storm sends n duplicates of a key, at once, to one Service while the
// first request of the key runs for hold, on a private Redis with the
// default configuration.
func storm(tb testing.TB, n int, hold time.Duration) stormCost {
	srv := redistest.StartPrivate(tb)
	client, err := storefx.New("default", storefx.Config{URL: srv.URL()})
	if err != nil {
		tb.Fatal(err)
	}
	s, err := New(client, Config{KeyPrefix: redistest.Prefix(tb), DefaultTTL: time.Minute})
	if err != nil {
		tb.Fatal(err)
	}
	_ = s.Start(context.Background())
	tb.Cleanup(func() { _ = s.Close(); _ = client.Close() })
	admin := srv.Client()

	_, _, idle0 := redisStats(tb, admin)
	time.Sleep(hold)
	_, _, idle1 := redisStats(tb, admin)

	release, entered, firstDone := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var returned atomic.Int64
	first := s.Install(Idempotent()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-release
		paymentHandler(w, r)
		returned.Store(time.Now().UnixNano())
	})))
	firstRec := httptest.NewRecorder()
	go func() { defer close(firstDone); first.ServeHTTP(firstRec, benchRequest("storm")) }()
	<-entered
	began := time.Now()
	cmds0, conns0, cpu0 := redisStats(tb, admin)

	waiter := s.Install(Idempotent()(http.HandlerFunc(paymentHandler)))
	var wg sync.WaitGroup
	answered := make([]int64, n)
	recs := make([]*httptest.ResponseRecorder, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			recs[i] = httptest.NewRecorder()
			waiter.ServeHTTP(recs[i], benchRequest("storm"))
			answered[i] = time.Now().UnixNano()
		}()
	}
	time.Sleep(time.Until(began.Add(hold)))
	close(release)
	wg.Wait()
	<-firstDone
	cmds1, conns1, cpu1 := redisStats(tb, admin)

	c := stormCost{cmds: map[string]int64{}, conns: conns1 - conns0, cpu: cpu1 - cpu0 - (idle1 - idle0)}
	for k, v := range cmds1 {
		if d := v - cmds0[k]; d > 0 {
			c.cmds[k], c.total = d, c.total+d
		}
	}
	for i, r := range recs {
		c.wake = append(c.wake, time.Duration(answered[i]-returned.Load()))
		if r.Code != http.StatusCreated || r.Header().Get(ReplayedHeader) != "true" || r.Body.String() != firstRec.Body.String() {
			c.bad = append(c.bad, strconv.Itoa(r.Code)+" "+r.Body.String())
		}
	}
	slices.Sort(c.wake)
	return c
}

// Issue 39, item 2: 50 duplicates of one key waiting in one process share
// one claim, one subscription and one poll. Today's bound, with the default
// PollInterval (500ms) and the first request running 1.5s: one claim of the
// first duplicate, one when its subscription is confirmed, one every
// PollInterval (3), each an EVALSHA running two HMGETs, TIME and HSET (5
// commands): 25; SUBSCRIBE and UNSUBSCRIBE; the first's completion (6). 33,
// whatever the number of duplicates; 40 leaves room for a loaded machine.
func TestRetryStorm_CoalescedInProcess(t *testing.T) {
	c := storm(t, 50, 1500*time.Millisecond)
	t.Logf("a burst of 50: %v", c)
	if len(c.bad) > 0 {
		t.Errorf("%d of 50 duplicates did not get the replay: %q", len(c.bad), c.bad)
	}
	if c.total > 40 || c.conns > 2 {
		t.Errorf("a burst of 50 duplicates cost Redis %d commands and %d connections, want at most 40 and 2", c.total, c.conns)
	}
}

// BenchmarkRetryStorm reports what a burst of 50 duplicates of one key costs
// Redis while the first request runs 1.5s, and how soon the 50 are answered
// after it returns: each burst's p50, p90 and slowest, the median of the
// bursts (one slow burst on a shared machine moves no figure).
func BenchmarkRetryStorm(b *testing.B) {
	var costs []stormCost
	for b.Loop() {
		costs = append(costs, storm(b, 50, 1500*time.Millisecond))
	}
	var cmds, conns float64
	var cpu time.Duration
	for _, c := range costs {
		cmds, conns, cpu = cmds+float64(c.total), conns+float64(c.conns), cpu+c.cpu
	}
	k := float64(len(costs))
	b.ReportMetric(cmds/k, "cmds/burst")
	b.ReportMetric(conns/k, "conns/burst")
	b.ReportMetric(float64(cpu.Microseconds())/k, "redis-cpu-µs/burst")
	for _, p := range []int{50, 90, 100} {
		var per []time.Duration
		for _, c := range costs {
			per = append(per, c.wake[min(len(c.wake)*p/100, len(c.wake)-1)])
		}
		slices.Sort(per)
		b.ReportMetric(float64(per[len(per)/2].Microseconds())/1000, "p"+strconv.Itoa(p)+"-wake-ms")
	}
}

// claims is a go-redis hook that counts claim scripts.
type claims struct{ n atomic.Int64 }

func (h *claims) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *claims) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *claims) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if args := cmd.Args(); len(args) > 1 && fmt.Sprint(args[1]) == idemscript.Claim.Hash() {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

// flockMembers is the number of requests waiting in the flocks of record.
func (s *Service) flockMembers(record string) int {
	s.flockMu.Lock()
	defer s.flockMu.Unlock()
	n := 0
	for k, f := range s.flocks {
		if k.record == record {
			n += f.members
		}
	}
	return n
}

// Duplicates that join a waiting duplicate send nothing to Redis, and each
// is answered on its own terms: the lead's client leaving hands the lead
// over, another member's leaving ends its wait only, and a duplicate with
// another fingerprint is no member (422 at once).
func TestRetryStorm_MembersLeaveOnTheirOwnTerms(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{WaitTimeout: 8 * time.Second, PollInterval: 20 * time.Second}, nil)
	var polls atomic.Int64
	e.svc.onWaitPoll = func() { polls.Add(1) }
	cl := &claims{}
	e.rdb.AddHook(cl)
	g, first := holdFirst(t, e, "k")
	record := e.svc.StoreKey("", "k")

	leadCtx, leave := context.WithCancel(context.Background())
	lead := make(chan reply, 1)
	go func() { lead <- e.postCtx(leadCtx, "/payments", "k", `{}`) }()
	waitFor(t, func() bool { return polls.Load() == 1 }) // its subscription confirmed, and answered with a poll
	before := cl.n.Load()
	memberCtx, memberLeaves := context.WithCancel(context.Background())
	member := make(chan reply, 1)
	go func() { member <- e.postCtx(memberCtx, "/payments", "k", `{}`) }()
	others := make(chan reply, 4)
	for range 4 {
		go func() { others <- e.post("/payments", "k", `{}`) }()
	}
	waitFor(t, func() bool { return e.svc.flockMembers(record) == 6 })
	if n := cl.n.Load() - before; n != 0 {
		t.Fatalf("5 duplicates joining a waiting one sent %d claims, want none", n)
	}
	wantStatus(t, e.post("/payments", "k", `{"other":1}`), 422, "")

	memberLeaves()
	if r := <-member; r.status != -1 {
		t.Fatalf("a member whose client left: %d %s", r.status, r.body)
	}
	leave()
	if r := <-lead; r.status != -1 {
		t.Fatalf("the lead whose client left: %d %s", r.status, r.body)
	}
	waitFor(t, func() bool { return e.svc.flockMembers(record) == 4 })
	g.open() // the next lead, watching the channel the first lead subscribed to, takes the message
	f := <-first
	if f.status != 201 {
		t.Fatalf("first: %d %s", f.status, f.body)
	}
	for range 4 {
		if r := <-others; r.status != 201 || r.header.Get(ReplayedHeader) != "true" || r.body != f.body {
			t.Fatalf("a member: %d %s, want the replay of %s", r.status, r.body, f.body)
		}
	}
	if n := cl.n.Load() - before; n != 1 || polls.Load() != 1 {
		t.Fatalf("%d claims (%d polls) after the first lead's, want the 422's only", n, polls.Load())
	}
}

// A lease that runs out under a flock is taken over by its lead alone; the
// other members wait for the lead's work and get its result.
func TestRetryStorm_OneTakeoverPerFlock(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{LockTimeout: 300 * time.Millisecond}, nil)
	record := e.svc.StoreKey("", "k")
	if c, _, err := e.svc.store.claim(context.Background(), record, "fp", "a-dead-owner", 300*time.Millisecond, false); err != nil || c.kind != claimNew {
		t.Fatalf("claim: %+v %v", c, err)
	}
	var runs atomic.Int64
	type result struct {
		out      string
		replayed bool
		err      error
	}
	results := make(chan result, 10)
	for range 10 {
		go func() {
			out, replayed, err := e.svc.Do(context.Background(), "k", "fp", func(context.Context) ([]byte, error) {
				runs.Add(1)
				time.Sleep(100 * time.Millisecond)
				return []byte("done"), nil
			})
			results <- result{string(out), replayed, err}
		}()
	}
	fresh := 0
	for range 10 {
		r := <-results
		if r.err != nil || r.out != "done" {
			t.Fatalf("a duplicate: %q %v", r.out, r.err)
		}
		if !r.replayed {
			fresh++
		}
	}
	if runs.Load() != 1 || fresh != 1 {
		t.Fatalf("the work ran %d times, %d results not replayed: want 1 and 1", runs.Load(), fresh)
	}
}
