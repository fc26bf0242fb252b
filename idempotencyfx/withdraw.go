package idempotencyfx

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/redisfx/redisfx/internal/ctxsleep"
	"github.com/redisfx/redisfx/storefx"
)

// A claim whose reply is lost (it timed out on a stalled Redis, or its
// connection failed) may still have run, or may run later: a stalled
// server reads it when it resumes. The request has answered 500
// idempotency_store_unavailable ("not processed, retry with the same
// key"), so a record left in progress for it would make that retry wait
// and get 409 until the lease ran out, with nothing running. The claim is
// withdrawn in the background instead (idemscript.Abandon): the record is
// deleted if the claim landed, and a marker refuses it if it arrives later.

// withdrawnMarkerLife is how long the marker of a withdrawn claim outlives
// the lease: a claim delivered later than LockTimeout + this (a connection
// held up for minutes) may still take the record for one lease.
const withdrawnMarkerLife = time.Minute

// answerLost reports whether a failed claim may have been run by Redis:
// not when storefx's breaker refused it (ErrCircuitOpen: no try of it was
// sent, a retry refused after a sent try has another error), nor when the
// client is closed (nothing can be withdrawn). Any other error may follow
// a send that landed: go-redis sends a command again when its connection
// fails, so the last try's error (a refused dial, an OOM reply) says
// nothing of the first.
func answerLost(err error) bool {
	return !errors.Is(err, storefx.ErrCircuitOpen) && !errors.Is(err, redis.ErrClosed)
}

// maxWithdrawals bounds the withdrawals in flight: with the circuit breaker
// disabled, an outage would otherwise start one per failed request, each
// trying for up to LockTimeout + 1 minute. Beyond it a lost claim is not
// withdrawn (logged, at most every 10 s): if Redis ran it, its key is held
// until the lease ends, as without withdrawals.
const maxWithdrawals = 1024

// withdrawClaim withdraws owner's claim of key in the background.
func (s *Service) withdrawClaim(parent context.Context, key, owner string) {
	if s.withdrawing.Add(1) > maxWithdrawals {
		s.withdrawing.Add(-1)
		if s.withdrawLog.Allow() {
			s.log.Error("idempotency: too many claims being withdrawn; this one is not: if Redis ran it, a retry of its key waits or gets 409 until its lease ends",
				zap.String("record", key), zap.Int("in_flight", maxWithdrawals))
		}
		return
	}
	if !s.late.start(func(stop context.Context) {
		defer s.withdrawing.Add(-1)
		s.withdraw(parent, stop, key, owner)
	}) {
		s.withdrawing.Add(-1)
	}
}

// withdraw runs the Abandon script until Redis answers it, each try bounded
// by StoreTimeout. The first goes out at once, through an open circuit
// breaker (the failure that lost the claim's reply may have opened it); a
// try that timed out is followed at once by the next, so that one is
// waiting when a stalled Redis resumes and the record, should the claim run
// first, is freed within a round trip. Later tries respect the breaker:
// while it is open they wait for its probe to find Redis again (checking
// every refusedPause, which costs no round trip), so a dead Redis is not
// sent a withdrawal per failed request. It gives up after LockTimeout +
// withdrawnMarkerLife, or when the Service closes.
func (s *Service) withdraw(parent, stop context.Context, key, owner string) {
	end := time.Now().Add(s.cfg.LockTimeout + withdrawnMarkerLife)
	ctx, cancel := context.WithCancel(context.WithoutCancel(parent))
	defer context.AfterFunc(stop, cancel)()
	defer cancel()
	pause, longest := 10*time.Millisecond, min(max(s.cfg.LockTimeout/10, 10*time.Millisecond), time.Second)
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
			ctxsleep.Sleep(ctx, refusedPause) // stopped: reported on the next turn
			continue
		}
		ctxsleep.Sleep(ctx, min(pause, time.Until(end)))
		pause = min(2*pause, longest)
	}
}

// refusedPause is how often a withdrawal asks again while the circuit
// breaker refuses it.
const refusedPause = 50 * time.Millisecond
