package lockfx

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/redisfx/redisfx/internal/faultproxy"
	"github.com/redisfx/redisfx/internal/obstest"
	"github.com/redisfx/redisfx/internal/redistest"
)

// A stall of every connection of the holder (packets dropped, as a
// partition does) that ends at least one renewal hedge (TTL/10) and a
// round trip before the validity does keeps the lock, wherever it falls
// in the renewal cycle: with TTL 3s, any stall shorter than
// 3000·(1 − 1/3 − 1/10) − 32 = 1668ms. 1s (longer than a renewal's
// timeout, TTL/5) leaves 670ms for round trips and a scheduler slowed by
// the race detector on a loaded machine (TTL 1s and a 400ms stall left
// 150ms, and 1.2s 470ms: such a machine overran both).
func TestRenewal_StallOfEveryConnection_WithinMargins_LockKept(t *testing.T) {
	t.Parallel()
	const ttl, stall = 3 * time.Second, time.Second
	srv := redistest.StartPrivate(t)
	for run := range 6 {
		t.Run(fmt.Sprint(run), func(t *testing.T) {
			t.Parallel()
			proxy := faultproxy.Start(t, srv.Addr())
			holder := lockerOn(t, proxy.Addr(), Config{TTL: ttl, AutoRenew: true, Attempts: 1})
			contender := lockerOn(t, srv.Addr(), Config{TTL: ttl, Attempts: 1})
			ctx := context.Background()
			name := fmt.Sprint("partition-", run)
			held, err := holder.Acquire(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(rand.N(ttl / 3)) // a random point of the renewal cycle
			proxy.SetMode(faultproxy.Blackhole)
			thawAt := time.Now().Add(stall)
			// Without a renewal after the stall, the lock would be free
			// by the end of the validity it had when the stall began.
			end := held.ValidUntil().Add(driftMargin(ttl) + 100*time.Millisecond)
			if end.Before(thawAt) {
				end = thawAt.Add(100 * time.Millisecond)
			}
			for ; time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
				if time.Now().After(thawAt) {
					proxy.SetMode(faultproxy.Forward)
				}
				if _, err := contender.Acquire(ctx, name); err == nil {
					t.Fatalf("the lock was taken after a %v stall of every connection (the holder was told: %v)", stall, held.Err())
				}
			}
			if err := held.Err(); err != nil {
				t.Fatalf("holder told %v after a %v stall", err, stall)
			}
			if err := held.Release(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A stall the TTL cannot absorb costs the lock, and the holder is told
// before anyone else can take it: its validity ends before a contender's
// Acquire returns, Err says ErrLockLost, Done is closed, the context from
// Context is cancelled with that cause, and lock_lost_total counts it.
func TestRenewal_LostLock_HolderToldBeforeAnotherAcquires(t *testing.T) {
	t.Parallel()
	const ttl = 600 * time.Millisecond
	srv := redistest.StartPrivate(t)
	proxy := faultproxy.Start(t, srv.Addr())
	reg := prometheus.NewRegistry()
	holder := lockerOn(t, proxy.Addr(), Config{TTL: ttl, AutoRenew: true, Attempts: 1}, WithRegisterer(reg))
	contender := lockerOn(t, srv.Addr(), Config{TTL: ttl, Attempts: 1})
	ctx := context.Background()
	held, err := holder.Acquire(ctx, "partition")
	if err != nil {
		t.Fatal(err)
	}
	heldCtx, cancel := held.Context(ctx)
	defer cancel()
	proxy.SetMode(faultproxy.Blackhole) // until the end: the lock cannot be kept
	var other *Lock
	for deadline := time.Now().Add(3 * ttl); other == nil; time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("nobody else ever got the lock")
		}
		other, _ = contender.Acquire(ctx, "partition")
	}
	acquiredAt := time.Now()
	if err := held.Err(); !errors.Is(err, ErrLockLost) {
		t.Fatalf("holder's Err when another acquired = %v, want ErrLockLost", err)
	}
	if end := held.ValidUntil(); !end.Before(acquiredAt) {
		t.Fatalf("holder valid until %v after the other's Acquire returned", end.Sub(acquiredAt))
	}
	t.Logf("the holder's validity ended %v before the other's Acquire returned", acquiredAt.Sub(held.ValidUntil()))
	select {
	case <-held.Done():
	default:
		t.Fatal("Done not closed")
	}
	<-heldCtx.Done()
	if cause := context.Cause(heldCtx); !errors.Is(cause, ErrLockLost) {
		t.Fatalf("context cause %v, want ErrLockLost", cause)
	}
	for name, want := range map[string]float64{"lock_lost_total": 1, "locks_active": 0} {
		if got := obstest.Value(t, reg, name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	if err := other.Release(ctx); err != nil {
		t.Fatalf("the new holder's release: %v", err)
	}
	rctx, rcancel := context.WithTimeout(ctx, 200*time.Millisecond) // the proxy still drops it
	defer rcancel()
	if err := held.Release(rctx); err == nil {
		t.Fatal("the lost lock's release succeeded")
	}
}

// A lock without renewal is valid for TTL minus the drift margin from the
// send of its acquire; WithLock cancels fn's context then, with cause
// ErrLockLost, and returns ErrLockLost although fn returned nil.
func TestWithLock_LockLostWhileFnRuns(t *testing.T) {
	t.Parallel()
	const ttl = 200 * time.Millisecond
	l := newLocker(t, Config{TTL: ttl})
	began := time.Now()
	var cause error
	err := l.WithLock(context.Background(), "slow-fn", func(ctx context.Context, token int64) error {
		<-ctx.Done() // fn outlives its lock
		cause = context.Cause(ctx)
		return nil
	})
	if !errors.Is(err, ErrLockLost) || !errors.Is(cause, ErrLockLost) {
		t.Fatalf("WithLock = %v, fn's context cause %v; want ErrLockLost for both", err, cause)
	}
	if d := time.Since(began); d < ttl-driftMargin(ttl)-time.Millisecond {
		t.Fatalf("fn's context cancelled after %v, before the validity (%v) ended", d, ttl-driftMargin(ttl))
	}
}

// A holder whose lock Redis lost (restart without persistence) learns it at
// the next renewal, TTL/3 later at most, not at the end of its validity.
func TestRenewal_RedisLostTheLock_HolderToldAtNextRenewal(t *testing.T) {
	t.Parallel()
	const ttl = 3 * time.Second
	srv := redistest.StartPrivate(t)
	l := lockerOn(t, srv.Addr(), Config{TTL: ttl, AutoRenew: true, Attempts: 1})
	held, err := l.Acquire(context.Background(), "wiped")
	if err != nil {
		t.Fatal(err)
	}
	srv.Restart()
	wiped := time.Now()
	select {
	case <-held.Done():
		if d := time.Since(wiped); d > ttl/3+ttl/10 {
			t.Fatalf("told %v after the restart", d)
		}
	case <-time.After(ttl):
		t.Fatal("never told")
	}
	if !errors.Is(held.Err(), ErrLockLost) {
		t.Fatalf("Err = %v", held.Err())
	}
}

// Extend lengthens the lease and the validity; it never shortens the lease
// in Redis (the validity would then be longer than it), and is refused on
// a released lock.
func TestExtend_LengthensNeverShortens(t *testing.T) {
	t.Parallel()
	srv := redistest.StartPrivate(t)
	l := lockerOn(t, srv.Addr(), Config{TTL: time.Second})
	ctx := context.Background()
	k, err := l.Acquire(ctx, "extend")
	if err != nil {
		t.Fatal(err)
	}
	before := k.ValidUntil()
	if err := k.Extend(ctx, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if d := k.ValidUntil().Sub(before); d < 3*time.Second {
		t.Fatalf("validity moved %v forward, want about 4s", d)
	}
	if err := k.Extend(ctx, 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if pttl := srv.Client().PTTL(ctx, mustKeys(t, l, "extend").lock).Val(); pttl < 4*time.Second {
		t.Fatalf("a shorter Extend shortened the lease to %v", pttl)
	}
	if err := k.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := k.Extend(ctx, 0); !errors.Is(err, ErrNotOwner) {
		t.Fatalf("Extend after Release = %v, want ErrNotOwner", err)
	}
}

// Nobody holds the lock, and Redis grants it, but its answer arrives after
// the validity it gave had ended (DEBUG SLEEP 300 ms, TTL 100 ms): the
// grant is given back, and Acquire's error is a timeout, not ErrNotAcquired
// (Redis never said anyone holds it). (Found by an adversary: it was
// ErrNotAcquired, "someone else holds it".)
func TestAcquire_GrantAnsweredAfterItsValidity_TimeoutNotErrNotAcquired(t *testing.T) {
	t.Parallel()
	const ttl = 100 * time.Millisecond
	srv := redistest.StartPrivate(t)
	l := lockerOn(t, srv.Addr(), Config{TTL: ttl, Attempts: 1, WaitTimeout: 3 * time.Second})
	ctx := context.Background()
	if err := l.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Stop(context.Background()) })
	var err error
	for try := 1; ; try++ {
		woke := srv.Sleep(3 * ttl)
		var k *Lock
		k, err = l.Acquire(ctx, "slow-grant")
		<-woke
		if err != nil {
			break
		}
		// Answered before the sleep began (a loaded machine): again.
		_ = k.Release(ctx)
		if try == 5 {
			t.Fatal("Acquire succeeded through the sleep 5 times")
		}
	}
	if errors.Is(err, ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire = %v, want an error wrapping context.DeadlineExceeded, not ErrNotAcquired: nobody held the lock", err)
	}
	if owner, gerr := srv.Client().Get(ctx, mustKeys(t, l, "slow-grant").lock).Result(); !errors.Is(gerr, redis.Nil) {
		t.Fatalf("the late grant was not given back: owner %q (%v)", owner, gerr)
	}
}

// A repeated delivery of one owner's acquire (a retry after a lost reply)
// gets the same token and does not hand out a new one.
func TestAcquireScript_RepeatedDeliveryGetsTheSameToken(t *testing.T) {
	t.Parallel()
	srv := redistest.StartPrivate(t)
	l := lockerOn(t, srv.Addr(), Config{})
	keys := mustKeys(t, l, "again")
	run := func(owner string) int64 {
		n, err := acquireScript.Run(context.Background(), l.rdb, []string{keys.lock, keys.fence, keys.abandoned(owner)},
			owner, 5000, fenceTTL.Milliseconds(), 60000).Int64()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	first := run("owner-a")
	if again := run("owner-a"); again != first {
		t.Fatalf("repeated delivery got token %d, first %d", again, first)
	}
	if other := run("owner-b"); other != 0 {
		t.Fatalf("another owner got token %d while held", other)
	}
}

// Config refuses a TTL that leaves no validity and a KeyPrefix whose hash
// tag is empty, naming the field.
func TestConfig_RefusesUselessTTLAndEmptyHashTagPrefix(t *testing.T) {
	for field, c := range map[string]Config{
		"Config.TTL":       {TTL: 5 * time.Millisecond},
		"Config.KeyPrefix": {KeyPrefix: "app{}:"},
	} {
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: %v", field, err)
		}
	}
	if err := (Config{KeyPrefix: "app{locks}:"}).Validate(); err != nil {
		t.Errorf("a prefix with a non-empty hash tag is refused: %v", err)
	}
}

// WithLock releases the lock when fn panics, and lets the panic through.
func TestWithLock_ReleasesWhenFnPanics(t *testing.T) {
	t.Parallel()
	l := newLocker(t, Config{TTL: 5 * time.Second, Attempts: 1})
	ctx := context.Background()
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("the panic did not come through")
			}
		}()
		_ = l.WithLock(ctx, "panics", func(context.Context, int64) error { panic("boom") })
	}()
	k, err := l.Acquire(ctx, "panics")
	if err != nil {
		t.Fatalf("the lock was not released after the panic: %v", err)
	}
	_ = k.Release(ctx)
}
