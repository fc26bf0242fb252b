// Package detach gives Redis calls on a request's path a context of their
// own: the request's values (its trace), none of its cancellation, and a
// deadline a fixed timeout away.
//
// context.WithTimeout(context.WithoutCancel(ctx), d) costs six allocations
// and a timer per call, a tenth of what a replayed request allocates. Calls
// that start within one grain (a sixty-fourth of the timeout) share one
// deadline here, rounded down to its grain, and with it one Done channel and
// one timer: a call gets at least the timeout minus a grain, never more.
package detach

import (
	"context"
	"sync/atomic"
	"time"
)

// grains is how many shared deadlines one timeout spans: the share of the
// timeout a call may lose to rounding is 1/grains.
const grains = 64

// Timeouts hands out detached contexts that end one timeout after they are
// made (rounded down to a grain). It is safe for concurrent use.
type Timeouts struct {
	timeout time.Duration
	grain   time.Duration
	epoch   time.Time // carries the monotonic clock, which every deadline inherits
	current atomic.Pointer[deadline]
}

// New returns Timeouts for timeout, which must be positive.
func New(timeout time.Duration) *Timeouts {
	if timeout <= 0 {
		panic("detach: timeout must be positive")
	}
	return &Timeouts{timeout: timeout, grain: max(timeout/grains, time.Nanosecond), epoch: time.Now()}
}

// Context returns a context with parent's values that parent's cancellation
// does not reach, done when its grain's deadline passes. Nothing needs
// releasing.
func (t *Timeouts) Context(parent context.Context) context.Context {
	d := t.deadline()
	// The values are looked up through a WithValue over the WithoutCancel:
	// its Value runs the context package's own lookup loop, which knows
	// WithoutCancel and allocates nothing, where calling a WithoutCancel's
	// Value directly allocates on every lookup.
	return &detached{Context: context.WithValue(context.WithoutCancel(parent), deadlineKey{}, d), d: d}
}

// deadlineKey is the key of a detached context's own value (its deadline),
// which is what the values' WithValue needs a key for.
type deadlineKey struct{}

// deadline is the shared deadline of the calls made now: the current one
// when it is this grain's, else a new one (the first call of a grain makes
// it; racing calls may each make one, and all are correct).
func (t *Timeouts) deadline() *deadline {
	// Time arithmetic, not Durations: Sub saturates where a sum of
	// Durations would overflow, so a timeout too long to count from the
	// epoch (near math.MaxInt64) ends about 292 years after it.
	n := int64(time.Now().Add(t.timeout).Sub(t.epoch) / t.grain)
	cur := t.current.Load()
	if cur != nil && cur.grain == n {
		return cur
	}
	at := t.epoch.Add(time.Duration(n) * t.grain)
	d := &deadline{grain: n, at: at, done: make(chan struct{})}
	time.AfterFunc(time.Until(at), func() { close(d.done) })
	if cur == nil || cur.grain < n {
		t.current.CompareAndSwap(cur, d)
	}
	return d
}

// deadline is one grain's end, shared by the contexts made in that grain.
type deadline struct {
	grain int64 // grains since the epoch
	at    time.Time
	done  chan struct{} // closed at at, by a timer
}

// detached is a context of Timeouts. Its embedded Context holds the
// parent's values over a context.WithoutCancel, which keeps the parent's
// cancellation out of every lookup (context.Cause's included).
type detached struct {
	context.Context
	d *deadline
}

// Deadline is the shared deadline of the context's grain.
func (c *detached) Deadline() (time.Time, bool) { return c.d.at, true }

// Done is closed by the grain's timer when the deadline passes.
func (c *detached) Done() <-chan struct{} { return c.d.done }

// Err is DeadlineExceeded once Done is closed: nothing else ends the context.
func (c *detached) Err() error {
	select {
	case <-c.d.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}
