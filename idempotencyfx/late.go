package idempotencyfx

import (
	"context"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/redisfx/redisfx/internal/backoff"
	"github.com/redisfx/redisfx/internal/durations"
)

// lateCompletions are the background tries of outcomes that their request
// could not record, and of claim withdrawals.
type lateCompletions struct {
	stop    context.Context // cancelled when Shutdown's grace ends: the tries give up
	cancel  context.CancelFunc
	mu      sync.Mutex
	closed  bool
	running sync.WaitGroup
}

func newLateCompletions() *lateCompletions {
	stop, cancel := context.WithCancel(context.Background())
	return &lateCompletions{stop: stop, cancel: cancel}
}

// start runs try in the background with parent's values, until Shutdown's
// grace ends; false once the Service is closing.
func (lc *lateCompletions) start(parent context.Context, try func(ctx context.Context)) bool {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	if lc.closed {
		return false
	}
	lc.running.Add(1)
	go func() {
		defer lc.running.Done()
		ctx, cancel := context.WithCancel(context.WithoutCancel(parent))
		defer context.AfterFunc(lc.stop, cancel)()
		defer cancel()
		try(ctx)
	}()
	return true
}

// shutdown lets the tries finish until ctx is done, then cancels the rest.
// A try already sent ends within StoreTimeout or when the client closes.
func (lc *lateCompletions) shutdown(ctx context.Context) {
	lc.mu.Lock()
	lc.closed = true
	lc.mu.Unlock()
	finished := make(chan struct{})
	go func() { lc.running.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-ctx.Done():
	}
	lc.cancel()
}

// completeLate retries the completion of l until it lands or is refused,
// the record's life is over, or the Service closes.
func (s *Service) completeLate(ctx context.Context, l *lease, state State, resp []byte, ttl time.Duration) {
	// The record expires before this: its owner's last renewal was earlier.
	end := time.Now().Add(durations.Mul(s.cfg.LockTimeout, 2))
	pause := backoff.Backoff{Min: 10 * time.Millisecond, Max: max(s.cfg.LockTimeout/10, 10*time.Millisecond)}
	why := "Redis out of reach while the record lived"
	tries := 2 // the request's own
	for {
		tries++
		done, err := l.try(ctx, state, resp, ttl)
		if err == nil && done == completionRefused {
			why = "the record was taken over or had expired"
			break
		}
		if err == nil {
			s.obs.count(OutcomeLateCompletion)
			s.log.Warn("idempotency: the outcome was recorded in the background after the request's tries failed",
				zap.String("record", l.key), zap.Int("tries", tries))
			s.reportCompletion(ctx, l, done)
			return
		}
		if !time.Now().Before(end) || !pause.Wait(ctx) {
			break
		}
	}
	if ctx.Err() != nil { // only Shutdown cancels it
		why = "the Service closed first"
	}
	s.obs.count(OutcomeLostCompletion)
	s.log.Error("idempotency: the outcome could not be recorded; a retry may run the handler again after the lease expires",
		zap.String("record", l.key), zap.String("reason", why), zap.Int("tries", tries))
}
