package lockfx

import (
	"context"
	"time"

	"github.com/redisfx/redisfx/plugintrace"
	"github.com/redisfx/redisfx/storefx"
)

// The renewal schedule of an auto-renewed lock, as fractions of its TTL.
// A renewal goes out renewEvery after the last confirmed one was sent.
// One still unanswered after renewHedge gets company: another goes out (on
// a freshly dialled connection, see hedgeClient), and so on, at most
// renewalsInFlight at a time, each waiting renewTimeout for its answer;
// after a failure the next goes out renewRetry later. So a renewal goes
// out at least every renewHedge: the lock survives any stall that ends
// renewHedge and a round trip before its validity does, a stall of some
// connections (new ones working) never costs it, and a slow but working Redis (answers within
// renewTimeout) keeps it too.
const (
	renewEvery   = 3  // TTL/3
	renewHedge   = 10 // TTL/10
	renewTimeout = 5  // TTL/5
	renewRetry   = 20 // TTL/20
	// renewalsInFlight bounds the renewals waiting on stuck connections
	// (a client without ContextTimeoutEnabled waits for its ReadTimeout
	// whatever the context says).
	renewalsInFlight = 3
)

// renewal is the outcome of one renewal call.
type renewal struct {
	sent  time.Time
	owned bool
	err   error
}

// renew keeps the lock's lease alive until the lock ends (released or
// lost) or the Locker stops. The first renewal goes out TTL/3 after the
// acquire was sent. Renewals are sent even while the client's circuit
// breaker is open, and without a span (housekeeping, not a trace of its
// own; still counted in the command metrics).
func (k *Lock) renew() {
	ttl := k.l.cfg.TTL
	renewalCtx := plugintrace.WithoutCommandSpans(storefx.BypassBreaker(k.l.stopped))
	results := make(chan renewal, renewalsInFlight) // never blocks a late call
	inFlight := 0
	lastConfirmed := k.sent
	next := time.NewTimer(time.Until(k.sent.Add(ttl / renewEvery)))
	defer next.Stop()
	for {
		select {
		case <-k.done:
			return
		case <-k.l.stopped.Done():
			return
		case <-next.C:
			if inFlight < renewalsInFlight {
				// A renewal sent while another is unanswered is a hedge: it
				// goes on a freshly dialled connection, since the other
				// may be stuck on a stalled pooled one, and so may every
				// idle one the pool would hand out next.
				hedge := inFlight > 0
				inFlight++
				k.l.background(func() {
					sent := time.Now()
					ctx, cancel := context.WithTimeout(renewalCtx, ttl/renewTimeout)
					var owned bool
					var err error
					if hedge {
						owned, err = k.extendOnANewConnection(ctx, ttl)
					} else {
						owned, err = k.extend(ctx, ttl)
					}
					cancel()
					results <- renewal{sent, owned, err}
				})
			}
			next.Reset(ttl / renewHedge) // still unanswered then: another one goes out
		case r := <-results:
			inFlight--
			switch {
			case r.err == nil && !r.owned:
				// Lost, whenever the renewal was sent: even one overtaken
				// by a later confirmed renewal is Redis saying that the
				// lock was not this owner's when it ran, and the first
				// such answer ends the lock (docs/locks.md).
				k.lose()
				return
			case r.sent.Before(lastConfirmed):
				// overtaken by a later renewal that was confirmed
			case r.err != nil:
				next.Reset(ttl / renewRetry)
			case !k.confirm(r.sent, ttl):
				return
			default:
				lastConfirmed = r.sent
				next.Reset(time.Until(r.sent.Add(ttl / renewEvery)))
			}
		}
	}
}
