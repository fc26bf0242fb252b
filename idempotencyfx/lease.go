package idempotencyfx

import (
	"context"
	"sync"
	"time"

	"go.uber.org/zap"
)

// lease is the ownership of an in-progress record. While the handler runs
// the lease is renewed every third of LockTimeout, so a slow but living
// handler never loses its record to a duplicate; when the owner dies the
// renewals stop and the lease runs out after LockTimeout. No goroutine runs
// between renewals (time.AfterFunc).
type lease struct {
	s     *Service
	key   string
	owner string
	token int64

	mu      sync.Mutex
	timer   *time.Timer
	stopped bool
	running sync.WaitGroup // an in-flight renewal
	lost    bool           // a renewal found another owner
}

func (s *Service) newLease(key, owner string, token int64) *lease {
	l := &lease{s: s, key: key, owner: owner, token: token}
	l.timer = time.AfterFunc(s.cfg.LockTimeout/3, l.renew)
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

	ctx, cancel := context.WithTimeout(context.Background(), l.s.cfg.StoreTimeout)
	ok, err := l.s.store.renew(ctx, l.key, l.owner, l.s.cfg.LockTimeout)
	cancel()
	next := l.s.cfg.LockTimeout / 3
	switch {
	case err != nil:
		l.s.log.Warn("idempotency: lease renewal failed; retrying", zap.String("record", l.key), zap.Error(err))
		next = l.s.cfg.LockTimeout / 10
	case !ok:
		l.mu.Lock()
		l.lost = true
		stopped := l.stopped
		l.mu.Unlock()
		if !stopped {
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
	l.mu.Lock()
	l.stopped = true
	l.timer.Stop()
	l.mu.Unlock()
	l.running.Wait()
}

// complete stops renewing and writes the outcome, if this lease still owns
// the record. It is not cancelled by the client going away (the request's
// context only carries the trace); it retries once on a store error, within
// StoreTimeout each.
func (l *lease) complete(parent context.Context, state State, resp []byte, ttl time.Duration) (owned bool, err error) {
	l.stop()
	parent = context.WithoutCancel(parent)
	for attempt := 0; attempt < 2; attempt++ {
		ctx, cancel := context.WithTimeout(parent, l.s.cfg.StoreTimeout)
		owned, err = l.s.store.complete(ctx, l.key, l.owner, state, resp, ttl)
		cancel()
		if err == nil {
			return owned, nil
		}
	}
	return false, err
}
