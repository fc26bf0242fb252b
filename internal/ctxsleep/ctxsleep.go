// Package ctxsleep waits for a duration or for a context, whichever ends
// first: the pause of a background loop that must stop with its context.
package ctxsleep

import (
	"context"
	"time"
)

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
