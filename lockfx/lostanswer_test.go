package lockfx

// Regression tests for three breaks of docs/locks.md reproduced by an
// adversary (2026-11-27), each against a private redis-server.

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisfx/redisfx/internal/redistest"
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
	l, err := New(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
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
