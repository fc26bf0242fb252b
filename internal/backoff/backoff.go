// Package backoff is the one retry pause of every loop that retries Redis:
// it doubles from Min up to Max, jittered so that many retrying processes
// spread out, and starts again from Min after Reset.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Backoff is the pause between tries of one loop. Not safe for concurrent use.
type Backoff struct {
	Min, Max time.Duration
	next     time.Duration
}

// Next returns the pause before the next try, a random duration in
// [d/2, d] where d doubles from Min to Max with every call.
func (b *Backoff) Next() time.Duration {
	d := min(max(b.next, b.Min), b.Max)
	b.next = b.Max
	if d < b.Max/2 {
		b.next = d * 2
	}
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d/2+1)
}

// Reset makes the next pause Min again: call it after a success.
func (b *Backoff) Reset() { b.next = 0 }

// Wait pauses for Next or until ctx ends; it reports whether ctx is live.
func (b *Backoff) Wait(ctx context.Context) bool { return Sleep(ctx, b.Next()) }

// Sleep waits d, or less if ctx is done first; it reports whether ctx is
// still live. A d of zero or less does not wait.
func Sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
