// Package throttle lets a repeated log line through at most once per
// interval, so that an outage is reported without flooding the log.
package throttle

import (
	"sync/atomic"
	"time"
)

// Every allows one event per Interval; the zero Interval allows all.
// Safe for concurrent use.
type Every struct {
	Interval time.Duration
	last     atomic.Int64 // unix nanos of the last allowed event
}

// Allow reports whether an event now may pass, and if so records it.
func (e *Every) Allow() bool {
	now := time.Now().UnixNano()
	last := e.last.Load()
	return now-last >= int64(e.Interval) && e.last.CompareAndSwap(last, now)
}

// Reset forgets the last event: the next one is allowed.
func (e *Every) Reset() { e.last.Store(0) }
