package idempotencyfx

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/redisfx/redisfx/internal/idemscript"
	"github.com/redisfx/redisfx/plugintrace"
	"github.com/redisfx/redisfx/storefx"
)

// renewalContext is where renewals start: past an open circuit breaker (they
// keep a lease that was granted) and without a span of their own.
var renewalContext = plugintrace.WithoutCommandSpans(storefx.BypassBreaker(context.Background()))

// lease is the ownership of an in-progress record, renewed every third of
// LockTimeout by time.AfterFunc while the work runs.
type lease struct {
	s     *Service
	key   string
	owner string
	token int64

	ended atomic.Bool // the work returned, or the lease stopped

	mu      sync.Mutex
	timer   *time.Timer
	stopped bool
	running sync.WaitGroup // an in-flight renewal
	events  []outboxEvent  // declared by Emit while the work runs
	queued  bool           // the events were handed to the relay
}

func (s *Service) newLease(key, owner string, token int64) *lease {
	l := &lease{s: s, key: key, owner: owner, token: token}
	// Under mu: the first renewal, which reads the timer, may run before AfterFunc returns.
	l.mu.Lock()
	l.timer = time.AfterFunc(s.cfg.LockTimeout/3, l.renew)
	l.mu.Unlock()
	return l
}

func (l *lease) renew() {
	l.mu.Lock()
	if l.stopped {
		l.mu.Unlock()
		return
	}
	l.running.Add(1)
	l.mu.Unlock()
	defer l.running.Done()

	// The next renewal goes out a third after this one was sent, whatever its round trip.
	period := l.s.cfg.LockTimeout / 3
	sent := time.Now()
	ctx, cancel := context.WithTimeout(renewalContext, min(l.s.cfg.StoreTimeout, period))
	n, err := idemscript.Renew.Run(ctx, l.s.store.rdb, []string{l.key}, l.owner, l.s.cfg.LockTimeout.Milliseconds()).Int()
	cancel()
	next := max(period-time.Since(sent), time.Millisecond)
	switch {
	case err != nil:
		l.s.log.Warn("idempotency: lease renewal failed; retrying", zap.String("record", l.key), zap.Error(err))
		next = l.s.cfg.LockTimeout / 10
	case n != 1: // another owner
		if !l.ended.Load() {
			l.s.log.Warn("idempotency: lease lost while the handler runs; its outcome will not be recorded",
				zap.String("record", l.key))
		}
		return
	}
	l.mu.Lock()
	if !l.stopped {
		l.timer.Reset(next)
	}
	l.mu.Unlock()
}

// stop ends renewals and waits for one in flight.
func (l *lease) stop() {
	l.ended.Store(true)
	l.mu.Lock()
	l.stopped = true
	l.timer.Stop()
	l.mu.Unlock()
	l.running.Wait()
}

// complete stops renewing and writes the outcome, trying twice (the script
// recognises a retry of a write that landed).
func (l *lease) complete(parent context.Context, state State, resp []byte, ttl time.Duration) (done completion, err error) {
	l.stop()
	for attempt := 0; attempt < 2; attempt++ {
		if done, err = l.try(parent, state, resp, ttl); err == nil {
			return done, nil
		}
	}
	return completionRefused, err
}

// try sends the completion once, past the circuit breaker.
// A failed outcome commits no events; events the script did not append
// with it are handed to the relay.
func (l *lease) try(parent context.Context, state State, resp []byte, ttl time.Duration) (completion, error) {
	var ev *eventCommit
	if len(l.events) > 0 && state != StateFailed {
		ev = l.s.outbox.commit(l.key, l.token, l.events)
	}
	done, ids, relay, unreplicated, err := l.s.store.complete(l.s.calls.Context(storefx.BypassBreaker(parent)), l.key, l.owner, state, resp, ttl, ev)
	if unreplicated {
		l.s.obs.count(OutcomeUnreplicatedCompletion)
	}
	if ev != nil {
		ev.finish(ids, err)
		// Only this try's word: a retry that finds the outcome recorded
		// cannot tell whether an earlier try appended the events (they are
		// in the index for the recovery if it did not).
		if relay && !l.queued {
			l.queued = true
			l.s.outbox.relaySoon(committed{record: l.key, token: l.token, events: l.events, at: time.Now()})
		}
	}
	return done, err
}
