package lockfx

// Regression tests for what an adversary broke (issue 15), each against
// private redis-servers (and a Cluster for the key layout).

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/redisfx/redisfx/internal/faultproxy"
	"github.com/redisfx/redisfx/internal/obstest"
	"github.com/redisfx/redisfx/internal/redistest"
	"github.com/redisfx/redisfx/storefx"
)

// clientOf is a storefx client of addr (a server or a proxy in front of one).
func clientOf(t *testing.T, addr string) *storefx.Client {
	t.Helper()
	c, err := storefx.New("default", storefx.Config{URL: "redis://" + addr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// lockerOn builds a Locker on addr with cfg (KeyPrefix "lock:" unless set).
func lockerOn(t *testing.T, addr string, cfg Config, opts ...Option) *Locker {
	t.Helper()
	return mustNew(t, clientOf(t, addr), cfg, opts...)
}

// mustKeys are the Redis keys of a lock name.
func mustKeys(t *testing.T, l *Locker, name string) lockKeys {
	t.Helper()
	k, err := l.keysOf(name)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// A stall of the holder's connection shorter than the TTL (a freeze of
// 75–92 % of it at a random point of the renewal cycle) must not cost an
// auto-renewed lock: a contender trying all along never gets it. The
// adversary saw it lost in 9 of 10 runs with TTL 600ms; 1.8s leaves the
// hedge on a new connection room on a loaded machine (about 1s instead of
// 340ms), in the same fractions of the TTL.
func TestRenewal_StalledConnection_LockKept(t *testing.T) {
	t.Parallel()
	const ttl = 1800 * time.Millisecond
	srv := redistest.StartPrivate(t)
	for run := range 10 {
		t.Run(fmt.Sprint(run), func(t *testing.T) {
			t.Parallel()
			proxy := faultproxy.Start(t, srv.Addr())
			holder := lockerOn(t, proxy.Addr(), Config{TTL: ttl, AutoRenew: true, Attempts: 1})
			contender := lockerOn(t, srv.Addr(), Config{TTL: ttl, Attempts: 1})
			ctx := context.Background()
			name := fmt.Sprint("stall-", run)
			held, err := holder.Acquire(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(rand.N(ttl / 3)) // a random point of the renewal cycle
			frozen := proxy.Conns()
			for _, c := range frozen {
				c.SetMode(faultproxy.Freeze)
			}
			stall := ttl*3/4 + rand.N(ttl/6)
			thawAt := time.Now().Add(stall)
			// The contender tries all through the stall and one TTL after it.
			for end := thawAt.Add(ttl); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
				if time.Now().After(thawAt) && frozen != nil {
					for _, c := range frozen {
						c.SetMode(faultproxy.Forward)
					}
					frozen = nil
				}
				if other, err := contender.Acquire(ctx, name); err == nil {
					t.Fatalf("a second Acquire took the lock (token %d) while the first holder (token %d) ran; stall %v",
						other.Token, held.Token, stall)
				}
			}
			if err := held.Release(ctx); err != nil {
				t.Fatalf("release after the stall: %v", err)
			}
		})
	}
}

// The holder's client has 16 idle pooled connections (the app used it
// concurrently a moment ago), and they all stall (frozen, as by a
// middlebox that lost their flows) while new connections to the same Redis
// work. go-redis hands every command an idle pooled connection first, so
// the hedges, not only the renewal they hedge, must go on a freshly dialled
// connection, or the lock is lost to a stall of some of the holder's
// connections. (Found by an adversary: lost with 6 or more pooled
// connections, a contender then acquiring it.)
func TestRenewal_StallOfEveryPooledConnection_NewOnesWork_LockKept(t *testing.T) {
	t.Parallel()
	const ttl = 600 * time.Millisecond
	srv := redistest.StartPrivate(t)
	proxy := faultproxy.Start(t, srv.Addr())
	rdb := clientOf(t, proxy.Addr())
	holder := mustNew(t, rdb, Config{TTL: ttl, AutoRenew: true, Attempts: 1})
	contender := lockerOn(t, srv.Addr(), Config{TTL: ttl, Attempts: 1})
	ctx := context.Background()
	var wg sync.WaitGroup
	for range 16 { // 16 connections in the pool, all idle again afterwards
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = rdb.Do(ctx, "BLPOP", "nothing", 0.2).Err()
		}()
	}
	wg.Wait()
	held, err := holder.Acquire(ctx, "pooled")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = held.Release(ctx) }()
	frozen := proxy.Conns()
	if len(frozen) < 6 {
		t.Fatalf("%d pooled connections: the test proves nothing", len(frozen))
	}
	for _, c := range frozen {
		c.SetMode(faultproxy.Freeze)
	}
	defer func() {
		for _, c := range frozen {
			c.SetMode(faultproxy.Forward)
		}
	}()
	// The contender tries for three TTLs, while the pooled connections stall.
	for end := time.Now().Add(3 * ttl); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if other, err := contender.Acquire(ctx, "pooled"); err == nil {
			_ = other.Release(ctx)
			t.Fatalf("a contender took the lock while only the holder's %d pooled connections stalled; holder's Err: %v",
				len(frozen), held.Err())
		}
	}
	if err := held.Err(); err != nil {
		t.Fatalf("the holder lost the lock: %v", err)
	}
}

// Fencing tokens keep growing when Redis restarts without persistence: a
// resource that remembers the highest token would otherwise refuse every
// later holder.
func TestFencingToken_IncreasesAcrossRestartWithoutPersistence(t *testing.T) {
	t.Parallel()
	srv := redistest.StartPrivate(t)
	l := lockerOn(t, srv.Addr(), Config{TTL: 5 * time.Second, Attempts: 1})
	ctx := context.Background()
	var last int64
	for range 5 {
		k, err := l.Acquire(ctx, "restart")
		if err != nil {
			t.Fatal(err)
		}
		last = k.Token
		_ = k.Release(ctx)
	}
	srv.Restart()
	k, err := l.Acquire(ctx, "restart")
	if err != nil {
		t.Fatal(err)
	}
	if k.Token <= last {
		t.Fatalf("token after the restart %d, before it %d: went backwards", k.Token, last)
	}
}

// A replica that had not received the last acquisitions takes over: the
// tokens it hands out must still be higher than any the old master gave.
func TestFencingToken_IncreasesAfterFailoverToLaggingReplica(t *testing.T) {
	t.Parallel()
	master := redistest.StartPrivate(t, redistest.WithArgs("--repl-diskless-sync-delay", "0"))
	host, port, _ := strings.Cut(master.Addr(), ":")
	replica := redistest.StartPrivate(t, redistest.WithArgs("--replicaof", host, port))
	proxy := faultproxy.Start(t, master.Addr())
	l := lockerOn(t, proxy.Addr(), Config{TTL: 5 * time.Second, Attempts: 1})
	ctx := context.Background()
	acquire := func() int64 {
		t.Helper()
		k, err := l.Acquire(ctx, "failover")
		if err != nil {
			t.Fatal(err)
		}
		_ = k.Release(ctx)
		return k.Token
	}
	var seen int64
	for range 3 {
		seen = acquire()
	}
	// The replica has the first three; then it stops following (the lag)
	// and the master hands out three more.
	fence := mustKeys(t, l, "failover").fence
	deadline := time.Now().Add(10 * time.Second)
	for {
		v, _ := replica.Client().Get(ctx, fence).Int64()
		if v == seen {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the replica never received the fence counter %d (has %d)", seen, v)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := replica.Client().Do(ctx, "REPLICAOF", "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		seen = acquire()
	}
	proxy.SetTarget(replica.Addr()) // the failover: clients now reach the promoted replica
	proxy.CutAll()
	if got := acquire(); got <= seen {
		t.Fatalf("token from the promoted replica %d, highest from the old master %d: not increasing", got, seen)
	}
}

// A fence counter evicted under a volatile-* maxmemory policy (it has an
// expiry, so it is a candidate) must not restart the tokens.
func TestFencingToken_IncreasesAfterFenceKeyEvicted(t *testing.T) {
	t.Parallel()
	srv := redistest.StartPrivate(t, redistest.WithArgs("--maxmemory", "4mb", "--maxmemory-policy", "volatile-lru"))
	l := lockerOn(t, srv.Addr(), Config{TTL: 5 * time.Second, Attempts: 1})
	ctx := context.Background()
	var last int64
	for range 3 {
		k, err := l.Acquire(ctx, "evicted")
		if err != nil {
			t.Fatal(err)
		}
		last = k.Token
		_ = k.Release(ctx)
	}
	rdb := srv.Client()
	fence := mustKeys(t, l, "evicted").fence
	filler := strings.Repeat("x", 1024)
	for i := 0; rdb.Exists(ctx, fence).Val() == 1; i++ {
		if i == 100000 {
			t.Fatal("the fence counter was never evicted")
		}
		rdb.Set(ctx, fmt.Sprintf("filler:%d", i), filler, time.Hour)
	}
	k, err := l.Acquire(ctx, "evicted")
	if err != nil {
		t.Fatal(err)
	}
	if k.Token <= last {
		t.Fatalf("token after the fence counter was evicted %d, before %d: went backwards", k.Token, last)
	}
}

// hostileNames are lock names that play with Redis Cluster hash tags.
var hostileNames = []string{"}x", "}", "}}", "{", "{}", "}{", "{x}", "a}b", "a{b}c", "~", "~{~}", "~{~}}x", ":fence", "x}:fence", "\x00\xff", strings.Repeat("}", 300)}

// Every lock name works on a Cluster (the lock and its fence counter in
// one slot), no two names share a lock, and the empty name is refused at
// once with a clear error.
func TestCluster_EveryLockNameWorks(t *testing.T) {
	t.Parallel()
	cluster := redistest.StartCluster(t, 3, 0)
	c, err := storefx.New("default", storefx.Config{Addrs: cluster.Addrs()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	l := mustNew(t, c, Config{TTL: 5 * time.Second, Attempts: 1})
	checkEveryName(t, l)
}

// The same names on a standalone server.
func TestEveryLockNameWorks(t *testing.T) {
	t.Parallel()
	checkEveryName(t, lockerOn(t, redistest.StartPrivate(t).Addr(), Config{TTL: 5 * time.Second, Attempts: 1}))
}

func checkEveryName(t *testing.T, l *Locker) {
	t.Helper()
	ctx := context.Background()
	held := map[string]*Lock{}
	for _, name := range hostileNames {
		k, err := l.Acquire(ctx, name)
		if err != nil {
			t.Fatalf("Acquire(%q) with every other name held: %v", name, err)
		}
		held[name] = k
	}
	for _, name := range hostileNames {
		if err := held[name].Release(ctx); err != nil {
			t.Fatalf("Release(%q): %v", name, err)
		}
	}
	if _, err := l.Acquire(ctx, ""); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Fatalf("Acquire(\"\") = %v, want an error saying the name is empty", err)
	}
}

// Releasing twice counts the lock out of locks_active once.
func TestLocksActive_DoubleRelease_StaysAtZero(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	l := newLocker(t, Config{TTL: 5 * time.Second}, WithRegisterer(reg))
	ctx := context.Background()
	k, err := l.Acquire(ctx, "twice")
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Release(ctx); err != nil {
		t.Fatal(err)
	}
	_ = k.Release(ctx)
	if got := obstest.Value(t, reg, "locks_active"); got != 0 {
		t.Fatalf("locks_active after a double release = %v, want 0", got)
	}
}

// An Acquire whose caller gave up during the acquire script (its context
// ended, or WaitTimeout ran out) must not leave the lock held by nobody for
// a whole TTL once the script runs: not when Redis was slow, and not when
// the script arrives after the give-up (a frozen connection delivers it
// late, after the give-up's own command on a fresh connection).
func TestAcquire_CallerGaveUpDuringScript_LockNotLeftHeld(t *testing.T) {
	t.Parallel()
	const ttl = 10 * time.Second
	cases := map[string]struct {
		waitTimeout, ctxTimeout time.Duration
		fault                   string
	}{
		"context/slow":       {5 * time.Second, 100 * time.Millisecond, "slow"},
		"context/frozen":     {5 * time.Second, 100 * time.Millisecond, "freeze"},
		"WaitTimeout/slow":   {100 * time.Millisecond, time.Minute, "slow"},
		"WaitTimeout/frozen": {100 * time.Millisecond, time.Minute, "freeze"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.StartPrivate(t)
			proxy := faultproxy.Start(t, srv.Addr())
			rdb := clientOf(t, proxy.Addr())
			l := mustNew(t, rdb, Config{TTL: ttl, Attempts: 1, WaitTimeout: c.waitTimeout})
			ctx := context.Background()
			// The scripts loaded (an EVALSHA arriving late would otherwise
			// fail with NOSCRIPT and take nothing), and one idle connection
			// left in the pool: the one to freeze.
			if err := l.Start(ctx); err != nil {
				t.Fatal(err)
			}
			const faultLength = 300 * time.Millisecond
			for try := 1; ; try++ {
				var stalled <-chan struct{}
				switch c.fault {
				case "slow":
					stalled = srv.Sleep(faultLength)
				case "freeze":
					for _, conn := range proxy.Conns() {
						conn.SetMode(faultproxy.Freeze)
					}
				}
				actx, cancel := context.WithTimeout(ctx, c.ctxTimeout)
				k, err := l.Acquire(actx, "gave-up")
				cancel()
				if stalled != nil {
					<-stalled // the script runs when the stall ends
				} else {
					time.Sleep(faultLength) // the freeze's length: the script is delivered when it ends
				}
				if err != nil {
					break
				}
				// The Acquire ran before the stall began (a loaded machine
				// answers the probe late): not the case under test; again.
				_ = k.Release(ctx)
				if try == 5 {
					t.Fatal("Acquire succeeded through the fault 5 times")
				}
			}
			proxy.SetMode(faultproxy.Forward)
			contender := lockerOn(t, srv.Addr(), Config{TTL: ttl, Attempts: 1})
			deadline := time.Now().Add(2 * time.Second)
			for {
				k, err := contender.Acquire(ctx, "gave-up")
				if err == nil {
					_ = k.Release(ctx)
					return
				}
				if time.Now().After(deadline) {
					pttl := srv.Client().PTTL(ctx, mustKeys(t, l, "gave-up").lock).Val()
					t.Fatalf("the lock stayed held by nobody after the caller gave up (%v); it expires in %v", err, pttl)
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}

// While a lock's slot migrates between Cluster masters (SETSLOT
// MIGRATING/IMPORTING, its keys moved one by one), Redis refuses a script
// whose keys are split between the two nodes with TRYAGAIN. Acquire
// returned that error on its first attempt and Release too, leaving the
// lock held until its TTL (WithLock drops Release's error). Now both try
// again, Acquire within Attempts and WaitTimeout, Release while the lease
// lasts, and the migration's end frees the lock at once.
func TestCluster_SlotMigration_AcquireAndReleaseWaitForIt(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-master cluster")
	}
	t.Parallel()
	cl := redistest.StartCluster(t, 3, 0)
	ctx := context.Background()
	cfg := Config{KeyPrefix: redistest.Prefix(t), TTL: 20 * time.Second, WaitTimeout: 6 * time.Second, Attempts: 1000}
	lockers := make([]*Locker, 3)
	for i := range lockers {
		c, err := storefx.New("default", storefx.Config{Addrs: cl.Addrs()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		if i == 2 {
			cfg.WaitTimeout = 300 * time.Millisecond // shorter than the migration
		}
		lockers[i] = mustNew(t, c, cfg)
	}
	a, b, impatient := lockers[0], lockers[1], lockers[2]
	held, err := a.Acquire(ctx, "n")
	if err != nil {
		t.Fatal(err)
	}
	keys, _ := a.keysOf("n")
	source := cl.MasterOf(keys.lock)
	migration := cl.BeginMigration(cl.Client().ClusterKeySlot(ctx, keys.lock).Val(), source, cl.OtherMaster(source))
	migration.Move(keys.lock) // the fence stays behind: the keys are split
	released, acquired := make(chan error, 1), make(chan *Lock, 1)
	go func() { released <- held.Release(ctx) }()
	go func() {
		l, err := b.Acquire(ctx, "n")
		if err != nil {
			t.Errorf("Acquire during the migration: %v", err)
		}
		acquired <- l
	}()
	// A WaitTimeout that the migration outlasts ends in a store error:
	// the migration's refusal, or a timeout when go-redis's own retries of
	// it were still sleeping; never ErrNotAcquired (nobody was heard
	// holding it).
	if l, err := impatient.Acquire(ctx, "n"); l != nil || errors.Is(err, ErrNotAcquired) ||
		!slotMoving(err) && !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Acquire with a WaitTimeout the migration outlasts: %v, %v", l, err)
	}
	time.Sleep(1500 * time.Millisecond) // the migration lasts longer than go-redis's own few retries
	select {
	case err := <-released:
		t.Fatalf("Release returned %v while the keys were split", err)
	default:
	}
	migration.End()
	if err := <-released; err != nil {
		t.Fatalf("Release after the migration: %v", err)
	}
	if l := <-acquired; l == nil || l.Token <= held.Token {
		t.Fatalf("after the migration B holds %+v, want a token above %d", l, held.Token)
	} else {
		_ = l.Release(ctx)
	}
}
