package idempotencyfx

import (
	"context"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisfx/redisfx/internal/idemcheck"
	"github.com/redisfx/redisfx/internal/redistest"
	"github.com/redisfx/redisfx/storefx"
)

// chkReplicationWindow is how far before a failover began a write may have
// been acknowledged by the old master and not reached the replica that took
// over (docs/operations.md: usually < 1 ms; more on a loaded machine).
const chkReplicationWindow = time.Second

// TestIdempotencyChecker_Sentinel is the checker against one master, two
// replicas and three Sentinels, every instance a storefx failover client
// (MasterName) with its breaker on, every server with min-replicas-to-write
// 1 (REDISFX_CHECK_SENTINEL_UNGUARDED=1 runs without it). The faults are the
// master killed (a replica takes over; the old one comes back empty and is
// made a replica), slept 3-4.5 s (past down-after-milliseconds: the
// Sentinels fail over, or keep it if their election fails), and slept or
// paused for 0.1-0.6 s. The rules are the checker's; besides, a key run
// twice must fall in the replication window of a failover (its first
// execution claimed or ended from chkReplicationWindow before the failover
// began until the Sentinels named the new master; unguarded, until the old
// master stopped taking writes). It reports the recovery time after each
// failover (the fault's start to the first claim that succeeds), the keys
// run twice and the refusals. It runs with make test-sentinel
// (REDISFX_TEST_SENTINEL).
func TestIdempotencyChecker_Sentinel(t *testing.T) {
	if os.Getenv("REDISFX_TEST_SENTINEL") == "" {
		t.Skip("a Sentinel checker: make test-sentinel (REDISFX_TEST_SENTINEL=1)")
	}
	t.Parallel()
	duration := idemcheck.Duration(t, 20*time.Second)
	seed, _ := idemcheck.Seed(t)
	began := time.Now()
	s := newChkSentinelWorld(t, seed)
	s.run(duration)
	w := s.chkWorld
	st := w.hist.Stats()
	t.Logf("seed %d, %v (%v in all): %s", seed, duration, time.Since(began).Round(time.Millisecond), st)
	t.Logf("refusals: %d store_unavailable (500), %d request_in_progress (409)",
		st.Answers["idempotency_store_unavailable"], st.Answers["idempotency_request_in_progress"])
	for _, f := range s.failovers {
		t.Logf("failover by %s at %s: first claim after %v, the old master took writes until %v after",
			f.cause, ts(f.Start), f.recovery.Round(time.Millisecond), f.End.Sub(f.Start).Round(time.Millisecond))
	}
	if st.Executions == 0 || st.Requests < 10 {
		t.Errorf("the checker did hardly anything: %s", st)
	}
	if s.kills == 0 {
		t.Error("no master was killed")
	}
	for _, sw := range s.switches {
		if !slices.ContainsFunc(s.failovers, func(f chkFailover) bool { return !sw.Before(f.Start) && !sw.After(f.End) }) {
			t.Errorf("the Sentinels failed over at %s, outside the failovers the checker caused", ts(sw))
		}
	}
	twice := w.hist.RunTwice(w.bounds)
	t.Logf("keys run twice: %d", len(twice))
	for _, p := range twice {
		a, b := p[0], p[1]
		where := "OUTSIDE every replication window"
		if f := s.windowOf(a); f != nil {
			where = "within the replication window of the failover at " + ts(f.Start)
		}
		msg := "key run twice: %q/%q, %s [%s, %s] then %s at %s, %s"
		args := []any{a.Scope, a.Key, a.ID, ts(a.Start), ts(a.End), b.ID, ts(b.Start), where}
		if s.windowOf(a) == nil {
			t.Errorf(msg, args...)
		} else {
			t.Logf(msg, args...)
		}
	}
	violations := w.hist.Check(w.bounds)
	for _, v := range violations[:min(len(violations), 10)] {
		t.Error(v)
	}
	if len(violations) > 0 {
		t.Log(w.hist.Explain(violations, 3))
		t.Errorf("%d violations; replay with:\n  REDISFX_TEST_SENTINEL=1 REDISFX_CHECK_SEED=%d REDISFX_CHECK_DURATION=%v go test -race -count=1 -run '^%s$' ./idempotencyfx",
			len(violations), seed, duration, t.Name())
	}
}

// chkSentinelWorld is a run of the Sentinel mode: the checker's world with
// its own servers and faults.
type chkSentinelWorld struct {
	*chkWorld
	servers   []*redistest.Server // the master and its replicas, as started
	sentinels []string
	ask       *redis.SentinelClient
	guarded   bool // the servers run with min-replicas-to-write 1
	kills     int
	longNaps  int // sleeps past down-after-milliseconds
	failovers []chkFailover
	switches  []time.Time // +switch-master, under mu
}

// chkFailover is one change of master: from the fault's start until the new
// master served and the old one took no more writes.
type chkFailover struct {
	cause      string
	Start, End time.Time
	recovery   time.Duration // to the first claim that succeeded
	named      time.Time     // the Sentinels named the new master
}

func newChkSentinelWorld(t *testing.T, seed uint64) *chkSentinelWorld {
	s := &chkSentinelWorld{chkWorld: &chkWorld{t: t, seed: seed, prefix: "chk:", hist: idemcheck.NewHistory()}}
	w := s.chkWorld
	w.cfg = chkConfig(w.prefix)
	w.bounds = idemcheck.Bounds{LockTimeout: w.cfg.LockTimeout, WaitTimeout: w.cfg.WaitTimeout,
		StoreTimeout: w.cfg.StoreTimeout, DefaultTTL: w.cfg.DefaultTTL, Breaker: 2 * time.Second, Margin: 2 * time.Second}
	// With min-replicas-to-write a master cut off from its replicas (one
	// that comes back after the Sentinels replaced it) refuses writes.
	var args []redistest.Option
	if s.guarded = os.Getenv("REDISFX_CHECK_SENTINEL_UNGUARDED") == ""; s.guarded {
		args = append(args, redistest.WithArgs("--min-replicas-to-write", "1", "--min-replicas-max-lag", "2"))
	}
	master := redistest.StartPrivate(t, args...)
	s.servers = []*redistest.Server{master}
	host, port, _ := net.SplitHostPort(master.Addr())
	ctx := context.Background()
	for range 2 {
		r := redistest.StartPrivate(t, args...)
		if err := r.Client().Do(ctx, "REPLICAOF", host, port).Err(); err != nil {
			t.Fatal(err)
		}
		s.servers = append(s.servers, r)
	}
	for range 3 {
		s.sentinels = append(s.sentinels, redistest.StartSentinel(t, master.Addr(),
			"sentinel down-after-milliseconds mymaster 1000", "sentinel failover-timeout mymaster 3000"))
	}
	s.ask = redis.NewSentinelClient(&redis.Options{Addr: s.sentinels[0], DisableIdentity: true})
	t.Cleanup(func() { _ = s.ask.Close() })
	s.waitSentinels(master.Addr())
	w.admin = redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "mymaster", SentinelAddrs: s.sentinels,
		DisableIdentity: true, DialTimeout: 200 * time.Millisecond, ReadTimeout: time.Second})
	t.Cleanup(func() { _ = w.admin.Close() })
	for i := range w.slots {
		w.slots[i] = s.newInstance()
	}
	return s
}

// waitSentinels waits (bounded) until every Sentinel knows the two others
// and both replicas, and master has both replicas online.
func (s *chkSentinelWorld) waitSentinels(master string) {
	ctx := context.Background()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		ready := true
		for _, addr := range s.sentinels {
			c := redis.NewSentinelClient(&redis.Options{Addr: addr, DisableIdentity: true})
			m, err := c.Master(ctx, "mymaster").Result()
			_ = c.Close()
			ready = ready && err == nil && m["num-other-sentinels"] == "2" && m["num-slaves"] == "2" &&
				net.JoinHostPort(m["ip"], m["port"]) == master
		}
		info, _ := s.servers[0].Client().Info(ctx, "replication").Result()
		if ready && strings.Contains(info, "connected_slaves:2") {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("the Sentinels did not learn of each other and of both replicas within 20s")
		}
	}
}

// master is the server the Sentinels name master now (nil if none).
func (s *chkSentinelWorld) master() *redistest.Server {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	addr, err := s.ask.GetMasterAddrByName(ctx, "mymaster").Result()
	if err != nil || len(addr) != 2 {
		return nil
	}
	for _, srv := range s.servers {
		if srv.Addr() == net.JoinHostPort(addr[0], addr[1]) {
			return srv
		}
	}
	return nil
}

// newInstance is an app instance whose client is storefx's failover client.
func (s *chkSentinelWorld) newInstance() *chkInstance {
	w := s.chkWorld
	in := w.blankInstance()
	client, err := storefx.New("chk", storefx.Config{Addrs: s.sentinels, MasterName: "mymaster",
		DialTimeout: 200 * time.Millisecond, ReadTimeout: time.Second, ConnectTimeout: 5 * time.Second})
	if err != nil {
		w.t.Fatal(err)
	}
	in.rdb = client
	if in.svc, err = New(in.rdb, w.cfg); err != nil {
		w.t.Fatal(err)
	}
	w.serve(in)
	return in
}

// run drives the checker's workers for d with the Sentinel faults, then
// checks the end state as the checker does.
func (s *chkSentinelWorld) run(d time.Duration) {
	w := s.chkWorld
	w.began = time.Now()
	deadline := w.began.Add(d)
	var workers sync.WaitGroup
	for i := range chkWorkers {
		rng := rand.New(rand.NewPCG(w.seed, uint64(i+1)))
		workers.Go(func() {
			for time.Now().Before(deadline) {
				w.request(rng)
				time.Sleep(time.Duration(rng.IntN(20)) * time.Millisecond)
			}
		})
	}
	probeCtx, stopProbe := context.WithCancel(context.Background())
	var probe sync.WaitGroup
	probe.Go(func() { w.hist.WatchStalls(probeCtx, w.admin, chkStallThreshold) })
	probe.Go(func() { s.watchSwitches(probeCtx) })
	faults := rand.New(rand.NewPCG(w.seed, 0))
	for time.Now().Before(deadline) {
		time.Sleep(min(time.Duration(500+faults.IntN(1500))*time.Millisecond, time.Until(deadline)))
		if time.Now().Before(deadline) {
			s.fault(faults)
			w.scanExpiries()
		}
	}
	stopProbe()
	probe.Wait()
	workers.Wait()
	w.extra.Wait()
	w.quiescent()
	for _, in := range w.slots {
		in.close()
	}
}

// fault injects one Sentinel fault: the first of a run kills the master,
// the second sleeps it past down-after-milliseconds.
// A sleep longer than down-after-milliseconds makes the Sentinels fail over
// while the master sleeps; a short one or a pause must not.
func (s *chkSentinelWorld) fault(rng *rand.Rand) {
	old := s.master()
	if old == nil {
		return
	}
	f := idemcheck.Fault{Kind: idemcheck.FaultPause, Instance: -1, Start: time.Now()}
	cause := ""
	switch n := rng.IntN(100); {
	case s.kills == 0 || n < 25 && s.kills < 3:
		s.kills++
		cause = "kill"
		old.Kill()
	case s.longNaps == 0 || n < 45:
		s.longNaps++
		cause = "DEBUG SLEEP past down-after"
		<-old.Sleep(time.Duration(3000+rng.IntN(1500)) * time.Millisecond)
	case n < 75:
		<-old.Sleep(time.Duration(100+rng.IntN(500)) * time.Millisecond)
	default:
		d := time.Duration(100+rng.IntN(500)) * time.Millisecond
		_ = old.Client().Do(context.Background(), "CLIENT", "PAUSE", d.Milliseconds(), "ALL").Err()
		time.Sleep(d)
	}
	if cause != "" && s.failover(cause, old, f.Start) {
		f.Kind = idemcheck.FaultRestart // the writes the new master had not received are lost
	}
	f.End = time.Now()
	s.t.Logf("%s fault %q on %s until %s", ts(f.Start), cause, old.Addr(), ts(f.End))
	s.hist.AddFault(f)
}

// watchSwitches records the time of every change of master the first
// Sentinel announces.
func (s *chkSentinelWorld) watchSwitches(ctx context.Context) {
	sub := s.ask.PSubscribe(ctx, "*")
	defer context.AfterFunc(ctx, func() { _ = sub.Close() })() // ReceiveMessage does not watch ctx
	for {
		m, err := sub.ReceiveMessage(ctx)
		if err != nil {
			return
		}
		s.t.Logf("%s sentinel: %s %s", ts(time.Now()), m.Channel, m.Payload)
		if m.Channel != "+switch-master" {
			continue
		}
		s.mu.Lock()
		s.switches = append(s.switches, time.Now())
		s.mu.Unlock()
	}
}

// failover waits (bounded) until a new master serves and the old one takes
// no more writes (a killed one is brought back empty, as a replica), and
// measures the first claim that succeeds after start. It reports false if
// the Sentinels kept the old master (their election failed while it slept).
func (s *chkSentinelWorld) failover(cause string, old *redistest.Server, start time.Time) bool {
	ctx := context.Background()
	deadline := start.Add(30 * time.Second)
	fo := chkFailover{cause: cause, Start: start}
	w := s.chkWorld
	svc := w.slots[0].svc
	for i := 0; fo.recovery == 0 && time.Now().Before(deadline); i++ {
		c, cancel := context.WithTimeout(ctx, time.Second)
		_, _, err := svc.Do(c, "probe."+strconv.FormatInt(start.UnixNano(), 10)+"."+strconv.Itoa(i), "probe",
			func(context.Context) ([]byte, error) { return []byte("ok"), nil })
		cancel()
		if m := s.master(); m != nil && m != old && fo.named.IsZero() {
			fo.named = time.Now()
		}
		if err == nil && fo.named.IsZero() && cause != "kill" && s.kept(old) {
			s.t.Logf("%s the Sentinels kept %s as the master after %s", ts(time.Now()), old.Addr(), cause)
			return false
		}
		if err == nil && !fo.named.IsZero() {
			fo.recovery = time.Since(start)
		} else {
			time.Sleep(20 * time.Millisecond)
		}
	}
	if cause == "kill" {
		old.Restart() // empty: the Sentinels make it a replica of the new master, no client's master
	}
	for cause != "kill" && time.Now().Before(deadline) { // it woke a master: its writes are lost once it is a replica
		role, err := old.Client().Do(ctx, "ROLE").Slice()
		if err == nil && len(role) > 0 && role[0] == "slave" {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	fo.End = time.Now()
	if fo.recovery == 0 {
		m, _ := s.ask.Master(ctx, "mymaster").Result()
		_, _, err := svc.Do(ctx, "probe.last", "probe", func(context.Context) ([]byte, error) { return nil, nil })
		s.t.Errorf("no claim succeeded within 30s of the failover by %s at %s (last: %v); the Sentinel says %v", cause, ts(start), err, m)
	}
	s.failovers = append(s.failovers, fo)
	return true
}

// kept tells whether every Sentinel names old the master with no failover
// under way or suspected.
func (s *chkSentinelWorld) kept(old *redistest.Server) bool {
	for _, addr := range s.sentinels {
		c := redis.NewSentinelClient(&redis.Options{Addr: addr, DisableIdentity: true})
		m, err := c.Master(context.Background(), "mymaster").Result()
		_ = c.Close()
		if err != nil || m["flags"] != "master" || net.JoinHostPort(m["ip"], m["port"]) != old.Addr() {
			return false
		}
	}
	return true
}

// windowOf is the failover in whose replication window execution a claimed
// or ended, if any.
// Guarded, it ends when the Sentinels name the new master; unguarded, when
// the old master stops taking writes.
func (s *chkSentinelWorld) windowOf(a idemcheck.Exec) *chkFailover {
	for i, f := range s.failovers {
		from, to := f.Start.Add(-chkReplicationWindow), f.End
		if s.guarded {
			to = f.named
		}
		in := func(t time.Time) bool { return !t.Before(from) && !t.After(to) }
		if in(a.Start) || in(a.End) {
			return &s.failovers[i]
		}
	}
	return nil
}

func ts(t time.Time) string { return t.Format("15:04:05.000") }
