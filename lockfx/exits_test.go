package lockfx

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/redisfx/redisfx/internal/redistest"
	"github.com/redisfx/redisfx/storefx"
)

// fnExits are the ways WithLock's fn can leave: returning, returning an
// error, panicking, runtime.Goexit (t.FailNow in a test), and never
// (blocked until released by the test, long after the app stopped).
var fnExits = []string{"return", "error", "panic", "goexit", "never"}

var errFn = errors.New("fn failed")

// runExit runs WithLock with an fn that leaves by exit, on a goroutine of
// its own (Goexit ends it). hold is called with the lock held; unblock
// ends a "never" fn. It reports whether fn ran, and delivers WithLock's
// error (nil for panic and Goexit, which do not return) once the goroutine
// ended.
func runExit(ctx context.Context, l *Locker, name, exit string, hold func(ctx context.Context), unblock <-chan struct{}) (ran bool, result <-chan error) {
	done := make(chan error, 1)
	started := make(chan struct{})
	go func() {
		var err error
		defer func() { done <- err }()
		defer func() { _ = recover() }()
		err = l.WithLock(ctx, name, func(ctx context.Context, _ int64) error {
			hold(ctx)
			close(started)
			switch exit {
			case "error":
				return errFn
			case "panic":
				panic("boom")
			case "goexit":
				runtime.Goexit()
			case "never":
				<-unblock
			}
			return nil
		})
	}()
	select {
	case <-started:
		return true, done
	case err := <-done:
		done <- err
		return false, done
	}
}

// Whatever way fn leaves, the lock is free in Redis at once, its renewals
// stop and no goroutine of the lock is left; an fn that never returns
// keeps the lock only until the Locker stops: its renewals end then, fn's
// context is cancelled with ErrLockLost when the validity runs out, and the
// key expires in Redis. Not parallel: it checks that no goroutine leaks.
func TestWithLock_EveryExitReleasesAndStopsRenewals(t *testing.T) {
	srv := redistest.StartPrivate(t)
	rdb, err := storefx.New("default", storefx.Config{URL: srv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	probe := srv.Client()
	ctx := context.Background()
	for _, exit := range fnExits {
		t.Run(exit, func(t *testing.T) {
			before := goleak.IgnoreCurrent()
			const ttl = 500 * time.Millisecond
			l, err := New(rdb, Config{KeyPrefix: "exit:", TTL: ttl, Attempts: 1, AutoRenew: true})
			if err != nil {
				t.Fatal(err)
			}
			keys, _ := l.keysOf(exit)
			unblock := make(chan struct{})
			defer close(unblock)
			var fnCtx context.Context
			ran, result := runExit(ctx, l, exit, exit, func(c context.Context) {
				fnCtx = c
				time.Sleep(ttl * 6 / 5) // outlives the first lease: renewed
				if c.Err() != nil || probe.Exists(ctx, keys.lock).Val() == 0 {
					t.Errorf("the lock was not renewed while fn ran: %v", context.Cause(c))
				}
			}, unblock)
			if !ran {
				t.Fatalf("fn never ran: %v", <-result)
			}
			if exit == "never" {
				if err := l.Stop(ctx); err != nil {
					t.Fatal(err)
				}
				select {
				case <-fnCtx.Done():
				case <-time.After(5 * ttl):
					t.Fatal("fn's context still live long after the Locker stopped and the validity ended")
				}
				if cause := context.Cause(fnCtx); !errors.Is(cause, ErrLockLost) {
					t.Errorf("fn's context ended with %v, want ErrLockLost", cause)
				}
				deadline := time.Now().Add(5 * ttl)
				for probe.Exists(ctx, keys.lock).Val() == 1 {
					if time.Now().After(deadline) {
						t.Fatal("the lock is still held (renewed) after the Locker stopped")
					}
					time.Sleep(10 * time.Millisecond)
				}
				unblock <- struct{}{}
			}
			werr := <-result
			switch exit {
			case "return":
				if werr != nil {
					t.Errorf("WithLock = %v", werr)
				}
			case "error":
				if !errors.Is(werr, errFn) {
					t.Errorf("WithLock = %v, want fn's error", werr)
				}
			}
			if exit != "never" && probe.Exists(ctx, keys.lock).Val() != 0 {
				t.Error("the lock is still held after fn left")
			}
			if err := l.Stop(ctx); err != nil {
				t.Fatal(err)
			}
			if err := goleak.Find(before, goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).reaper")); err != nil {
				t.Errorf("goroutines left after fn left by %s: %v", exit, err)
			}
		})
	}
}

// A Release that fails (here its context had ended, so nothing was sent)
// gives the lock back in the background: it is not left held for its TTL.
// WithLock relies on it when Redis fails the release after fn left.
func TestRelease_FailedIsGivenBack(t *testing.T) {
	t.Parallel()
	srv := redistest.StartPrivate(t)
	rdb, err := storefx.New("default", storefx.Config{URL: srv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	l := mustNew(t, rdb, Config{TTL: time.Minute, Attempts: 1})
	lock, err := l.Acquire(context.Background(), "n")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := lock.Release(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Release with an ended context = %v", err)
	}
	giveBacksDone(t, l, 5*time.Second)
	if pttl := srv.Client().PTTL(context.Background(), lock.keys.lock).Val(); pttl != -2*time.Nanosecond {
		t.Fatalf("the lock is still held (PTTL %v) after a failed Release", pttl)
	}
}
