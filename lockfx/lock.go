package lockfx

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisfx/redisfx"
	"github.com/redisfx/redisfx/internal/backoff"
	"github.com/redisfx/redisfx/internal/nodeclient"
	"github.com/redisfx/redisfx/plugintrace"
	"github.com/redisfx/redisfx/storefx"
)

// ErrLockLost means the lock's validity ran out before it was released, or
// Redis answered that another owner holds it: from then on the holder must
// act as if someone else holds it.
var ErrLockLost = &redisfx.BaseError{Code: "lock_lost", Message: "lockfx: the lock was lost: its lease ran out or another owner holds it"}

// driftMargin is how much earlier than Redis a holder's view of a lease
// ends: 1% (clock rates) plus 2ms (Redis's millisecond expiries), as in
// Redlock.
func driftMargin(lease time.Duration) time.Duration { return lease/100 + 2*time.Millisecond }

// Lock is a held lock. Its validity ends TTL minus driftMargin after the
// holder sent the last acquire or renewal that Redis confirmed: before
// Redis lets anyone else take the lock. Done, Err and Context report its
// end, or a release.
type Lock struct {
	l     *Locker
	name  string
	keys  lockKeys
	owner string
	// Token is the fencing token: it grows with every acquisition of the
	// name, restarts and failovers included, so a downstream store can
	// refuse writes with an older one.
	Token int64

	sent time.Time // when the successful acquire call was sent

	mu         sync.Mutex
	validUntil time.Time   // end of the validity (monotonic clock)
	expiry     *time.Timer // fires at validUntil
	done       chan struct{}
	err        error // why done is closed: ErrLockLost, or ErrNotOwner after Release
	released   bool
}

// newLock starts the validity of a lock whose acquire call was sent at sent.
func newLock(l *Locker, name string, keys lockKeys, owner string, token int64, sent time.Time) *Lock {
	validUntil := sent.Add(l.cfg.TTL - driftMargin(l.cfg.TTL))
	k := &Lock{l: l, name: name, keys: keys, owner: owner, Token: token, sent: sent, validUntil: validUntil, done: make(chan struct{})}
	k.mu.Lock()
	k.expiry = time.AfterFunc(time.Until(validUntil), k.onExpiry)
	k.mu.Unlock()
	return k
}

// Done is closed when the lock is released or lost (Err says which), at
// the end of the validity as promptly as a timer fires; Err reads the
// clock itself, so check it right before a step that must not overlap
// another holder.
func (k *Lock) Done() <-chan struct{} {
	_ = k.end(nil)
	return k.done
}

// Err is nil while the lock is held and valid; ErrLockLost once it was
// lost; ErrNotOwner once it was released.
func (k *Lock) Err() error { return k.end(nil) }

// ValidUntil is when the validity ends unless a renewal or Extend is
// confirmed before. It only moves forward.
func (k *Lock) ValidUntil() time.Time {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.validUntil
}

// Context returns a copy of parent that is cancelled when the lock is lost
// or released, with context.Cause set to Err. Call the CancelFunc when
// done with it.
func (k *Lock) Context(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	go func() {
		select {
		case <-k.done:
			cancel(k.Err())
		case <-ctx.Done():
		}
	}()
	return ctx, func() { cancel(context.Canceled) }
}

// end ends the lock with err, once, and returns why it ended (nil: it
// has not). With err nil it ends it only if the validity is over, even
// when the expiry timer has not fired yet.
func (k *Lock) end(err error) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.endLocked(err)
}

func (k *Lock) endLocked(err error) error {
	if err == nil && !time.Now().Before(k.validUntil) {
		err = ErrLockLost
	}
	if k.err == nil && err != nil {
		k.err = err
		k.expiry.Stop()
		close(k.done)
		k.l.obs.ended(errors.Is(err, ErrLockLost))
	}
	return k.err
}

func (k *Lock) onExpiry() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.endLocked(nil) == nil { // moved forward while the timer was firing
		k.expiry.Reset(time.Until(k.validUntil))
	}
}

// confirm moves the validity forward after Redis confirmed a lease of
// lease from a command sent at sent. It reports false when the lock had
// already ended: the validity never comes back once over.
func (k *Lock) confirm(sent time.Time, lease time.Duration) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.endLocked(nil) != nil {
		return false
	}
	if until := sent.Add(lease - driftMargin(lease)); until.After(k.validUntil) {
		k.validUntil = until
		k.expiry.Reset(time.Until(until))
	}
	return true
}

// Release gives the lock up: nil when it was this holder's until then;
// ErrLockLost when its validity had ended (Redis's key is still deleted if
// it is this owner's); ErrNotOwner when Redis did not have it for this
// owner (no proof of a loss: go-redis may have retried a release whose
// answer was lost), and on a second Release. A release that fails is
// given back in the background.
func (k *Lock) Release(ctx context.Context) error {
	k.mu.Lock()
	if k.released {
		k.mu.Unlock()
		return ErrNotOwner
	}
	k.released = true
	wasLost := k.endLocked(nil) != nil
	var retryUntil time.Time // a migration's refusal is retried while the lease lasts
	if !wasLost {
		retryUntil = k.validUntil
	}
	_ = k.endLocked(ErrNotOwner)
	k.mu.Unlock()

	ctx, span := k.l.obs.start(ctx, k.name, "lock.release", "DEL")
	var n int
	err := whileMigrating(ctx, retryUntil, func() (err error) {
		n, err = releaseScript.Run(ctx, k.l.rdb, []string{k.keys.lock, k.keys.abandoned(k.owner)}, k.owner, k.l.markerTTL().Milliseconds()).Int()
		return err
	})
	switch {
	case err != nil:
		k.l.abandon(k.keys, k.owner) // the release may not have run: given back in the background
		err = fmt.Errorf("lockfx: release %s: %w", k.l.cfg.KeyAttribute.Quote(k.name), err)
	case wasLost:
		err = ErrLockLost
	case n == 0:
		err = ErrNotOwner
	}
	k.l.obs.endRelease(span, err)
	return err
}

// Extend makes the lease last at least ttl from now (0: the TTL), never
// shorter, and moves the validity forward. ErrLockLost (ErrNotOwner after
// Release) when the lock had ended, or Redis says this owner lost it.
func (k *Lock) Extend(ctx context.Context, ttl time.Duration) error {
	if ttl <= 0 {
		ttl = k.l.cfg.TTL
	}
	if err := k.Err(); err != nil {
		return err
	}
	sent := time.Now()
	var owned bool
	err := whileMigrating(ctx, k.ValidUntil(), func() (err error) {
		owned, err = k.extend(ctx, ttl, false)
		return err
	})
	switch {
	case err != nil:
		return fmt.Errorf("lockfx: extend %s: %w", k.l.cfg.KeyAttribute.Quote(k.name), err)
	case !owned:
		_ = k.end(ErrLockLost)
		return k.Err() // ErrLockLost, or ErrNotOwner if Release ran meanwhile
	case !k.confirm(sent, ttl):
		return k.Err()
	}
	return nil
}

// extend runs extendScript: whether this owner still held the lock. A
// hedge goes on a new connection to the key's node (go-redis hands out
// idle pooled connections first, which may all be stalled).
func (k *Lock) extend(ctx context.Context, ttl time.Duration, hedge bool) (bool, error) {
	var c redis.Scripter = k.l.rdb
	if hedge {
		if node, err := nodeclient.ForKey(ctx, k.l.rdb, k.keys.lock); err == nil && node != nil {
			one := nodeclient.OneConn(node, "")
			defer one.Close()
			c = one
		}
	}
	n, err := extendScript.Run(ctx, c, []string{k.keys.lock}, k.owner, ttl.Milliseconds()).Int()
	return n == 1, err
}

// whileMigrating runs call again while the lock's slot moves between
// Cluster nodes (slotMoving), until ctx ends or until would pass: go-redis's
// own few retries may not outlast a migration.
func whileMigrating(ctx context.Context, until time.Time, call func() error) error {
	pause := backoff.Backoff{Min: 10 * time.Millisecond, Max: 100 * time.Millisecond}
	for {
		err := call()
		if !slotMoving(err) || !time.Now().Add(pause.Max).Before(until) || !pause.Wait(ctx) {
			return err
		}
	}
}

// slotMoving reports a refusal while the script's slot moves between
// Cluster masters, after which Redis ran nothing: TRYAGAIN, or the MOVED
// or ASK go-redis returns once its redirections run out.
func slotMoving(err error) bool {
	if err == nil {
		return false
	}
	_, moved := redis.IsMovedError(err)
	_, ask := redis.IsAskError(err)
	return moved || ask || redis.IsTryAgainError(err)
}

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
