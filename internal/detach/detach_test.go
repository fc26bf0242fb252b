package detach

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type key struct{}

// The deadline lies between Timeout minus a grain and Timeout from the
// moment the context is made, and the context ends there, not before, with
// DeadlineExceeded (as its Cause too).
func TestContext_EndsAtItsDeadlineWithinAGrainOfTheTimeout(t *testing.T) {
	const timeout = 64 * time.Millisecond // grain 1ms
	tt := New(timeout)
	for range 8 {
		before := time.Now()
		ctx := tt.Context(context.Background())
		after := time.Now()
		at, ok := ctx.Deadline()
		if !ok {
			t.Fatal("no deadline")
		}
		if at.After(after.Add(timeout)) || !at.After(before.Add(timeout-timeout/grains)) {
			t.Fatalf("deadline %v after making it, want within (%v, %v]", at.Sub(before), timeout-timeout/grains, timeout)
		}
		if err := ctx.Err(); err != nil {
			t.Fatalf("Err before the deadline: %v", err)
		}
		<-ctx.Done()
		if now := time.Now(); now.Before(at) {
			t.Fatalf("done %v before its deadline", at.Sub(now))
		}
		if !errors.Is(ctx.Err(), context.DeadlineExceeded) || !errors.Is(context.Cause(ctx), context.DeadlineExceeded) {
			t.Fatalf("Err %v, Cause %v, want DeadlineExceeded", ctx.Err(), context.Cause(ctx))
		}
	}
}

// The parent's values pass; its cancellation does not, not even as a Cause.
func TestContext_KeepsValuesNotCancellation(t *testing.T) {
	parent, cancel := context.WithCancelCause(context.WithValue(context.Background(), key{}, "trace"))
	ctx := New(time.Hour).Context(parent)
	cancel(errors.New("client went away"))
	if got := ctx.Value(key{}); got != "trace" {
		t.Fatalf("value %v, want trace", got)
	}
	select {
	case <-ctx.Done():
		t.Fatal("the parent's cancellation reached the context")
	default:
	}
	if ctx.Err() != nil || context.Cause(ctx) != nil {
		t.Fatalf("Err %v, Cause %v after the parent was cancelled, want nil", ctx.Err(), context.Cause(ctx))
	}
}

// Contexts made within one grain share one deadline: one channel and one
// timer for all of them, which is the point of the package. A loop of a
// hundred calls may cross at most one boundary of an hour-long grain.
func TestContext_CallsOfOneGrainShareADeadline(t *testing.T) {
	tt := New(grains * time.Hour)
	seen := map[<-chan struct{}]bool{}
	for range 100 {
		seen[tt.Context(context.Background()).Done()] = true
	}
	if len(seen) > 2 {
		t.Fatalf("%d deadlines for 100 calls in one grain, want at most 2", len(seen))
	}
}

// A context derived from a detached one (WithCancel, AfterFunc) ends with it.
func TestContext_ChildrenEndWithIt(t *testing.T) {
	ctx := New(time.Millisecond).Context(context.Background())
	child, cancel := context.WithCancel(ctx)
	defer cancel()
	ran := make(chan struct{})
	context.AfterFunc(ctx, func() { close(ran) })
	<-child.Done()
	<-ran
	if !errors.Is(child.Err(), context.DeadlineExceeded) {
		t.Fatalf("child Err %v, want DeadlineExceeded", child.Err())
	}
}

// Many goroutines making contexts at once: each gets a deadline within its
// bounds and ends at it (run with -race).
func TestContext_Concurrent(t *testing.T) {
	const timeout = 5 * time.Millisecond
	tt := New(timeout)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			for range 50 {
				before := time.Now()
				ctx := tt.Context(context.Background())
				at, _ := ctx.Deadline()
				if at.After(time.Now().Add(timeout)) || !at.After(before.Add(timeout-timeout/grains)) {
					errs <- errors.New("deadline out of bounds")
					return
				}
				<-ctx.Done()
				if time.Now().Before(at) || ctx.Err() == nil {
					errs <- errors.New("done before its deadline")
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// A timeout too long to add to the time since New without overflowing a
// Duration (math.MaxInt64, as a configuration may say for "no limit") still
// gives a deadline in the future and a live context. Found by an
// adversary: the sum overflowed, the deadline fell in 1739 and every call
// failed at once.
func TestContext_HugeTimeoutsDoNotOverflow(t *testing.T) {
	for _, timeout := range []time.Duration{math.MaxInt64, math.MaxInt64 - time.Millisecond, math.MaxInt64 / 2} {
		tt := New(timeout)
		tt.epoch = tt.epoch.Add(-time.Hour) // made an hour ago: the sum with the timeout overflows
		ctx := tt.Context(context.Background())
		at, _ := ctx.Deadline()
		if min := time.Now().Add(100 * 365 * 24 * time.Hour); at.Before(min) || ctx.Err() != nil {
			t.Fatalf("timeout %v: deadline %v, Err %v; want a live context ending after %v", timeout, at, ctx.Err(), min)
		}
	}
}
