// Package detach gives Redis calls on a request's path the request's values,
// none of its cancellation, and a deadline a fixed timeout away, cheaper than
// context.WithTimeout(context.WithoutCancel(ctx), d): calls that start within
// a sixty-fourth of the timeout share one rounded-down deadline and timer.
package detach

import (
	"context"
	"sync/atomic"
	"time"
)

// grains is how many shared deadlines one timeout spans.
const grains = 64

// Timeouts hands out detached contexts. It is safe for concurrent use.
type Timeouts struct {
	timeout time.Duration
	grain   time.Duration
	epoch   time.Time // carries the monotonic clock, which every deadline inherits
	current atomic.Pointer[deadline]
}

// New returns Timeouts for timeout, which must be positive.
func New(timeout time.Duration) *Timeouts {
	return &Timeouts{timeout: timeout, grain: max(timeout/grains, time.Nanosecond), epoch: time.Now()}
}

// Context returns a context with parent's values, done when its grain's
// deadline passes. Nothing needs releasing.
func (t *Timeouts) Context(parent context.Context) context.Context {
	d := t.deadline()
	// A WithValue over the WithoutCancel: its lookup loop knows WithoutCancel
	// and allocates nothing, where WithoutCancel's own Value allocates.
	return &detached{Context: context.WithValue(context.WithoutCancel(parent), deadlineKey{}, d), d: d}
}

// deadlineKey is the key of a detached context's own value.
type deadlineKey struct{}

// deadline is the shared deadline of the calls made now (racing calls may
// each make one, and all are correct).
func (t *Timeouts) deadline() *deadline {
	// Sub saturates where a sum of Durations would overflow.
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

// detached is a context of Timeouts.
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
