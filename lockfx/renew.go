package lockfx

import (
	"context"
	"time"

	"github.com/redisfx/redisfx/plugintrace"
	"github.com/redisfx/redisfx/storefx"
)

// The renewal schedule, in fractions of the TTL: a renewal goes out
// renewEvery after the last confirmed one was sent; one unanswered after
// renewHedge gets company on a new connection (the pooled ones may be
// stalled), at most renewalsInFlight, each waiting renewTimeout; after a
// failure the next goes out renewRetry later.
const (
	renewEvery       = 3  // TTL/3
	renewHedge       = 10 // TTL/10
	renewTimeout     = 5  // TTL/5
	renewRetry       = 20 // TTL/20
	renewalsInFlight = 3
)

type renewal struct {
	sent  time.Time
	owned bool
	err   error
}

// renew keeps the lock's lease alive until the lock ends or the Locker
// stops. Renewals go through an open circuit breaker, and make no span:
// housekeeping is not a trace of its own.
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
				hedge := inFlight > 0
				inFlight++
				k.l.background(func() {
					sent := time.Now()
					ctx, cancel := context.WithTimeout(renewalCtx, ttl/renewTimeout)
					owned, err := k.extend(ctx, ttl, hedge)
					cancel()
					results <- renewal{sent, owned, err}
				})
			}
			next.Reset(ttl / renewHedge) // still unanswered then: another one goes out
		case r := <-results:
			inFlight--
			switch {
			case r.err == nil && !r.owned:
				// Redis says it was not this owner's, even if overtaken
				_ = k.end(ErrLockLost)
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
