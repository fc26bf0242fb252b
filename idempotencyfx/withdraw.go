package idempotencyfx

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/redisfx/redisfx/internal/backoff"
	"github.com/redisfx/redisfx/storefx"
)

// withdrawnMarkerLife is how long the marker of a withdrawn claim outlives
// the lease: a claim delivered later than LockTimeout + this (a connection
// held up for minutes) may still take the record for one lease.
const withdrawnMarkerLife = time.Minute

// answerLost reports whether a failed claim may have been run by Redis: any
// error but a breaker refusal or a closed client (go-redis re-sends a command
// whose connection failed, so its last error says nothing of the first send).
func answerLost(err error) bool {
	return !errors.Is(err, storefx.ErrCircuitOpen) && !errors.Is(err, redis.ErrClosed)
}

// maxWithdrawals bounds the withdrawals in flight: without the circuit
// breaker an outage would start one per failed request.
const maxWithdrawals = 1024

// withdrawClaim withdraws owner's claim of key in the background, so that a
// retry does not wait for a lease nobody holds.
func (s *Service) withdrawClaim(parent context.Context, key, owner string) {
	if s.withdrawing.Add(1) > maxWithdrawals {
		s.withdrawing.Add(-1)
		if s.withdrawLog.Allow() {
			s.log.Error("idempotency: too many claims being withdrawn; this one is not: if Redis ran it, a retry of its key waits or gets 409 until its lease ends",
				zap.String("record", key), zap.Int("in_flight", maxWithdrawals))
		}
		return
	}
	if !s.late.start(parent, func(ctx context.Context) {
		defer s.withdrawing.Add(-1)
		s.withdraw(ctx, key, owner)
	}) {
		s.withdrawing.Add(-1)
	}
}

// withdraw runs the Abandon script until Redis answers it. The first try
// goes past the circuit breaker (the lost reply may have opened it); one
// that timed out is followed at once, so that one is queued when a stalled
// Redis resumes. It gives up after LockTimeout + withdrawnMarkerLife.
func (s *Service) withdraw(ctx context.Context, key, owner string) {
	end := time.Now().Add(s.cfg.LockTimeout + withdrawnMarkerLife)
	pause := backoff.Backoff{Min: 10 * time.Millisecond, Max: min(max(s.cfg.LockTimeout/10, 10*time.Millisecond), time.Second)}
	for tries := 1; ; tries++ {
		began := time.Now()
		tctx, tcancel := context.WithTimeout(ctx, s.cfg.StoreTimeout)
		if tries == 1 {
			tctx = storefx.BypassBreaker(tctx)
		}
		landed, err := s.store.abandon(tctx, key, owner, s.cfg.LockTimeout+withdrawnMarkerLife)
		tcancel()
		switch {
		case err == nil && landed:
			s.log.Warn("idempotency: a claim whose reply was lost had reached Redis; it was withdrawn, so a retry runs at once",
				zap.String("record", key), zap.Int("tries", tries))
			return
		case err == nil:
			return // the claim, should it still arrive, takes nothing
		case errors.Is(err, redis.ErrClosed), ctx.Err() != nil, !time.Now().Before(end):
			s.log.Error("idempotency: a claim whose reply was lost could not be withdrawn; if Redis ran it, a retry of its key waits or gets 409 until its lease ends",
				zap.String("record", key), zap.Int("tries", tries), zap.Error(err))
			return
		case time.Since(began) >= s.cfg.StoreTimeout:
			continue // timed out on a stalled Redis: try again at once
		case errors.Is(err, storefx.ErrCircuitOpen):
			backoff.Sleep(ctx, 50*time.Millisecond) // stopped: reported on the next turn
			continue
		}
		backoff.Sleep(ctx, min(pause.Next(), time.Until(end)))
	}
}
