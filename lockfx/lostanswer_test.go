package lockfx

// Regression tests for three breaks of docs/locks.md reproduced by an
// adversary (2026-11-27), each against a private redis-server.

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisfx/redisfx/internal/faultproxy"
	"github.com/redisfx/redisfx/internal/redistest"
	"github.com/redisfx/redisfx/storefx"
)

// scriptGate is a go-redis hook on one script's EVALSHA: once armed, it
// holds the next call back until release is closed (entered is closed when
// it is held), then sends it; replaceErr, when set, replaces the answer
// with that error after Redis ran the script: an answer lost, and the
// error what a retry got.
type scriptGate struct {
	script     *redis.Script
	sha        string
	armed      atomic.Bool
	hold       bool
	entered    chan struct{}
	release    chan struct{}
	answered   chan int64
	replaceErr error
}

func newScriptGate(s *redis.Script, hold bool) *scriptGate {
	return &scriptGate{script: s, sha: s.Hash(), hold: hold, entered: make(chan struct{}), release: make(chan struct{}), answered: make(chan int64, 1)}
}

func (g *scriptGate) DialHook(next redis.DialHook) redis.DialHook { return next }
func (g *scriptGate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (g *scriptGate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		if len(args) < 2 || args[0] != "evalsha" || args[1] != g.sha || !g.armed.CompareAndSwap(true, false) {
			return next(ctx, cmd)
		}
		if g.hold {
			close(g.entered)
			<-g.release
		}
		err := next(ctx, cmd)
		if c, ok := cmd.(*redis.Cmd); ok && err == nil {
			v, _ := c.Int64()
			g.answered <- v
		}
		if g.replaceErr != nil && err == nil {
			cmd.SetErr(g.replaceErr)
			return g.replaceErr
		}
		return err
	}
}

// gatedLocker is a Locker on srv whose client has g as a hook. g's script
// is loaded first, so that its first call is the EVALSHA the gate holds
// (not one answered NOSCRIPT and sent again as EVAL).
func gatedLocker(t *testing.T, srv *redistest.Server, g *scriptGate, cfg Config) *Locker {
	t.Helper()
	c := clientOf(t, srv.Addr())
	if err := g.script.Load(context.Background(), c).Err(); err != nil {
		t.Fatal(err)
	}
	c.AddHook(g)
	l := mustNew(t, c, cfg)
	return l
}

// An acquire whose script ran (the lock taken) but whose call ended in a
// Redis error (a retry after the lost answer met LOADING, READONLY, ...)
// is given back: Acquire skipped the give-back for any Redis error,
// assuming the script had not run, and the lock stayed held by nobody for
// the whole TTL.
func TestAcquire_RedisErrorAfterTheScriptRan_GivenBack(t *testing.T) {
	t.Parallel()
	srv := redistest.StartPrivate(t)
	ctx := context.Background()
	redisErr := srv.Client().Do(ctx, "NO-SUCH-COMMAND").Err() // a real redis.Error
	var re redis.Error
	if !errors.As(redisErr, &re) {
		t.Fatalf("not a redis.Error: %v", redisErr)
	}
	g := newScriptGate(acquireScript, false)
	g.replaceErr = redisErr
	l := gatedLocker(t, srv, g, Config{KeyPrefix: "lock:", TTL: time.Minute, Attempts: 1})
	g.armed.Store(true)
	if lock, err := l.Acquire(ctx, "acct"); err == nil || lock != nil {
		t.Fatalf("Acquire: %v, %v; want the replaced error", lock, err)
	}
	if token := <-g.answered; token <= 0 {
		t.Fatalf("the script answered %d: it did not take the lock, nothing is tested", token)
	}
	giveBacksDone(t, l, 10*time.Second)
	keys := mustKeys(t, l, "acct")
	if owner, err := srv.Client().Get(ctx, keys.lock).Result(); !errors.Is(err, redis.Nil) {
		t.Fatalf("the lock is held by %q (pttl %v) after Acquire failed", owner, srv.Client().PTTL(ctx, keys.lock).Val())
	}
	other := lockerOn(t, srv.Addr(), Config{TTL: time.Minute, Attempts: 1})
	lock, err := other.Acquire(ctx, "acct")
	if err != nil {
		t.Fatalf("another owner cannot take the lock: %v", err)
	}
	_ = lock.Release(ctx)
}

// A renewal that Redis answers "not this owner's" ends the lock at once,
// even when a renewal sent after it (a hedge) was confirmed first: the
// answer was dropped as overtaken, and the holder learnt it only at the
// next renewal, a third of the TTL later (here 3 s; the test allows 2 s).
func TestRenewal_NotOwnerAnswerAfterAConfirmedHedge_EndsTheLock(t *testing.T) {
	t.Parallel()
	srv := redistest.StartPrivate(t)
	ctx := context.Background()
	const ttl = 9 * time.Second
	g := newScriptGate(extendScript, true)
	l := gatedLocker(t, srv, g, Config{KeyPrefix: "lock:", TTL: ttl, AutoRenew: true, Attempts: 1})
	g.armed.Store(true)
	lock, err := l.Acquire(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lock.Release(ctx) }()
	before := lock.ValidUntil()
	<-g.entered // the first renewal, held back before it is sent
	for deadline := time.Now().Add(10 * time.Second); !lock.ValidUntil().After(before); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the hedge was never confirmed")
		}
	}
	if err := srv.Client().Del(ctx, mustKeys(t, l, "x").lock).Err(); err != nil { // Redis loses the key
		t.Fatal(err)
	}
	other := lockerOn(t, srv.Addr(), Config{TTL: ttl, Attempts: 1})
	lock2, err := other.Acquire(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lock2.Release(ctx) }()
	close(g.release)
	if answer := <-g.answered; answer != 0 {
		t.Fatalf("the held-back renewal was answered %d, want 0 (not this owner's)", answer)
	}
	select {
	case <-lock.Done():
		if !errors.Is(lock.Err(), ErrLockLost) {
			t.Fatalf("Err() %v, want ErrLockLost", lock.Err())
		}
	case <-time.After(2 * time.Second):
		t.Fatalf("Redis answered that the lock is not this owner's, and 2 s later Done is open (Err %v) while token %d holds it", lock.Err(), lock2.Token)
	}
}

// An Extend whose call Redis runs after a Release of the same lock returns
// ErrNotOwner, as docs/locks.md says, not ErrLockLost.
func TestExtend_RacingRelease_IsErrNotOwner(t *testing.T) {
	t.Parallel()
	srv := redistest.StartPrivate(t)
	ctx := context.Background()
	g := newScriptGate(extendScript, true)
	l := gatedLocker(t, srv, g, Config{KeyPrefix: "lock:", TTL: 30 * time.Second})
	lock, err := l.Acquire(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	g.armed.Store(true)
	extended := make(chan error, 1)
	go func() { extended <- lock.Extend(ctx, 0) }()
	<-g.entered
	if err := lock.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	close(g.release)
	if err := <-extended; !errors.Is(err, ErrNotOwner) {
		t.Fatalf("Extend that ran after Release: %v, want ErrNotOwner", err)
	}
}

// The give-backs that failed acquires leave (every failed call is given
// back, above) must not hammer a Redis that refuses them. Under maxmemory,
// Redis refused the acquire scripts (OOM at their SET NX) and then every
// try of their give-backs too, whose marker SET came first: 200 failed
// acquires kept 200 give-backs sending 9,400 EVALSHA a second (found by an
// adversary). The marker is written with pcall now: the lock is freed at
// once, and a give-back whose marker was refused tries again every 500 ms
// at most until memory is freed, then lands.
func TestGiveBack_RedisOutOfMemory_BacksOffThenLands(t *testing.T) {
	t.Parallel()
	srv := redistest.StartPrivate(t)
	ctx := context.Background()
	l := lockerOn(t, srv.Addr(), Config{TTL: 10 * time.Second, Attempts: 1})
	outOfMemory(t, srv)
	const failed = 20
	for i := range failed {
		if lock, err := l.Acquire(ctx, "job-"+strconv.Itoa(i)); err == nil || !strings.Contains(err.Error(), "OOM") {
			t.Fatalf("Acquire under maxmemory: %v, %v; want Redis's OOM", lock, err)
		}
	}
	time.Sleep(time.Second) // the give-backs' pauses grow to their bound
	before, began := evalshaCalls(t, srv), time.Now()
	time.Sleep(2 * time.Second)
	rate := float64(evalshaCalls(t, srv)-before) / time.Since(began).Seconds()
	t.Logf("%d give-backs sent %.0f calls a second to the out-of-memory Redis", failed, rate)
	if rate > 4*failed { // about two a second each; every 20 ms was 940
		t.Errorf("%d give-backs sent %.0f calls a second to a Redis that refuses them", failed, rate)
	}
	memoryFreed(t, srv)
	giveBacksDone(t, l, 5*time.Second) // memory freed: the markers land
	for i := range failed {            // nothing left held, and no marker blocks a new owner
		lock, err := l.Acquire(ctx, "job-"+strconv.Itoa(i))
		if err != nil {
			t.Fatalf("Acquire after the memory was freed: %v", err)
		}
		_ = lock.Release(ctx)
	}
}

// An acquire stalled on a frozen connection while Redis is out of memory,
// given up by its caller, and delivered once memory is freed: its
// give-back freed nothing (nothing was held) and had its marker refused,
// so the delivery takes the lock; the give-back, still trying, writes its
// marker and frees the lock at its next try, within 500 ms. (With the
// marker written by pcall and the give-back ended at Redis's first answer,
// the lock stayed held for its whole TTL: found by an adversary.)
func TestGiveBack_RedisOutOfMemory_LateDeliveryFreedSoon(t *testing.T) {
	t.Parallel()
	srv := redistest.StartPrivate(t)
	proxy := faultproxy.Start(t, srv.Addr())
	ctx := context.Background()
	l := mustNew(t, clientOf(t, proxy.Addr()), Config{KeyPrefix: "lock:", TTL: 10 * time.Second, Attempts: 1})
	if err := l.Start(ctx); err != nil { // the scripts loaded: the late EVALSHA runs
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Stop(context.Background()) })
	admin := srv.Client()
	outOfMemory(t, srv)
	conns := proxy.Conns()
	for _, c := range conns { // the idle connections: the acquire stalls on one
		c.SetMode(faultproxy.Freeze)
	}
	// Long enough for the send to reach the frozen connection however
	// slow the machine; a deadline met before the send stalls nothing.
	actx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	if _, err := l.Acquire(actx, "late"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire on a frozen connection: %v", err)
	}
	cancel()
	keys := mustKeys(t, l, "late")
	for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if n := admin.Exists(ctx, keys.lock).Val(); n != 0 { // nothing was delivered yet
			t.Fatal("the lock is held before the stalled acquire was delivered")
		}
	}
	// The give-back's tries are held back (every connection frozen, new
	// ones too) from before memory is freed until the stalled acquire
	// took the lock: else a try landing first leaves its marker, the
	// acquire takes nothing, and the test proves nothing.
	proxy.SetMode(faultproxy.Freeze)
	memoryFreed(t, srv)
	for _, c := range conns { // the stalled acquire is delivered now
		c.SetMode(faultproxy.Forward)
	}
	for deadline := time.Now().Add(5 * time.Second); admin.Exists(ctx, keys.fence).Val() == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) { // the acquire script sets it only when it grants
			t.Fatal("the late acquire did not take the lock within 5s of the thaw: the test proves nothing")
		}
	}
	proxy.SetMode(faultproxy.Forward) // the give-back's next try lands
	giveBacksDone(t, l, 5*time.Second)
	if owner, err := admin.Get(ctx, keys.lock).Result(); !errors.Is(err, redis.Nil) {
		t.Fatalf("the lock is held (owner %q, pttl %v) by an acquire whose caller gave up, after its give-back ended",
			owner, admin.PTTL(ctx, keys.lock).Val())
	}
	other := lockerOn(t, srv.Addr(), Config{TTL: 10 * time.Second, Attempts: 1})
	lock, err := other.Acquire(ctx, "late")
	if err != nil {
		t.Fatalf("another owner cannot take the lock: %v", err)
	}
	_ = lock.Release(ctx)
}

// While a lock's slot is split between two Cluster nodes, Redis answers
// TRYAGAIN to every script on it, the give-backs' included: they back off
// to giveBackRefusedPause instead of trying every 20 ms (one acquire's
// give-backs drew 535 TRYAGAIN a second for as long as the migration
// lasted: found by an adversary), and land soon after it ends, leaving the
// holder's lock alone.
func TestGiveBack_SlotMigrating_BacksOffAndLandsAfter(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3, 0)
	c, err := storefx.New("default", storefx.Config{Addrs: cl.Addrs()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	l := mustNew(t, c, Config{KeyPrefix: "lock:", TTL: 10 * time.Second, WaitTimeout: 2 * time.Second, Attempts: 20})
	ctx := context.Background()
	held, err := l.Acquire(ctx, "n")
	if err != nil {
		t.Fatal(err)
	}
	keys := mustKeys(t, l, "n")
	source := cl.MasterOf(keys.lock)
	target := cl.OtherMaster(source)
	migration := cl.BeginMigration(cl.Client().ClusterKeySlot(ctx, keys.lock).Val(), source, target)
	migration.Move(keys.lock) // the fence counter stays behind: the script's keys are split
	// TRYAGAIN, or on a loaded machine "did not answer in time" when
	// go-redis's own TRYAGAIN retries outlast WaitTimeout: given back alike.
	if lock, err := l.Acquire(ctx, "n"); err == nil {
		t.Fatalf("Acquire during the split took the lock: %v", lock)
	}
	tryAgains := func() (n int64) {
		for _, s := range []*redistest.Server{source, target} {
			for _, line := range strings.Split(s.Client().Info(ctx, "errorstats").Val(), "\n") {
				if v, ok := strings.CutPrefix(strings.TrimSpace(line), "errorstat_TRYAGAIN:count="); ok {
					c, _ := strconv.ParseInt(v, 10, 64)
					n += c
				}
			}
		}
		return n
	}
	time.Sleep(time.Second) // the give-backs' pauses grow to their bound
	before, began := tryAgains(), time.Now()
	time.Sleep(2 * time.Second)
	rate := float64(tryAgains()-before) / time.Since(began).Seconds()
	migration.End()
	ended := time.Now()
	giveBacksDone(t, l, 5*time.Second)
	t.Logf("%.0f TRYAGAIN a second while the slot was split; the give-backs landed %v after it ended", rate, time.Since(ended).Round(time.Millisecond))
	// At most Attempts give-backs, each trying about twice a second once
	// backed off: 40 a second; every 20 ms they were 500 and more.
	if rate > 100 {
		t.Errorf("the give-backs drew %.0f TRYAGAIN a second while the slot was split", rate)
	}
	if held.Err() != nil {
		t.Fatalf("the holder's lock ended: %v", held.Err())
	}
	if err := held.Release(ctx); err != nil {
		t.Fatalf("the holder's Release after the give-backs: %v", err)
	}
}

// A give-back whose marker is already there (an earlier try wrote it and
// its answer was lost) ends at the next answer, even from a Redis out of
// memory, which refuses the SET: it kept trying twice a second until
// memory was freed (found by an adversary).
func TestGiveBack_MarkerAlreadyThere_EndsUnderOutOfMemory(t *testing.T) {
	t.Parallel()
	srv := redistest.StartPrivate(t)
	ctx := context.Background()
	l := lockerOn(t, srv.Addr(), Config{TTL: 10 * time.Second, Attempts: 1})
	keys := mustKeys(t, l, "m")
	const owner = "0123456789abcdef0123456789abcdef"
	admin := srv.Client()
	if err := admin.Set(ctx, keys.abandoned(owner), "1", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	outOfMemory(t, srv)
	l.abandon(keys, owner)
	giveBacksDone(t, l, 3*time.Second) // still out of memory
}

// outOfMemory makes srv refuse every write that needs memory (maxmemory 1
// byte, no eviction) until memoryFreed or the end of the test.
func outOfMemory(t *testing.T, srv *redistest.Server) {
	t.Helper()
	ctx := context.Background()
	for _, kv := range [][2]string{{"maxmemory-policy", "noeviction"}, {"maxmemory", "1"}} {
		if err := srv.Client().ConfigSet(ctx, kv[0], kv[1]).Err(); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _ = srv.Client().ConfigSet(context.Background(), "maxmemory", "0").Err() })
}

// memoryFreed ends outOfMemory.
func memoryFreed(t *testing.T, srv *redistest.Server) {
	t.Helper()
	if err := srv.Client().ConfigSet(context.Background(), "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
}
