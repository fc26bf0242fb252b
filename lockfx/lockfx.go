package lockfx

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisfx/redisfx"
	"github.com/redisfx/redisfx/internal/clientcheck"
	"github.com/redisfx/redisfx/internal/ctxsleep"
	"github.com/redisfx/redisfx/internal/fxconfig"
	"github.com/redisfx/redisfx/internal/randid"
	"github.com/redisfx/redisfx/internal/scripts"
	"github.com/redisfx/redisfx/plugintrace"
	"github.com/redisfx/redisfx/storefx"
)

// Config holds the lock options. Zero fields take the defaults. Every
// duration is at most 100 years; a longer one is refused, naming it.
type Config struct {
	// KeyPrefix is put before the lock name. Default "lock:".
	KeyPrefix string
	// TTL is the lease of a lock: it expires this long after the last
	// acquire, extend or renewal. At least 10ms, at most 100 years. Default
	// 10s.
	TTL time.Duration
	// Attempts is the most tries of one Acquire (1 = no retry). Default 20.
	Attempts int
	// Backoff is the wait before the first retry; it doubles up to
	// MaxBackoff, with jitter. Defaults 25ms and 500ms.
	Backoff    time.Duration
	MaxBackoff time.Duration
	// WaitTimeout bounds the whole Acquire, retries included. Default 5s.
	WaitTimeout time.Duration
	// KeyAttribute is how lock names are written into the
	// redisfx.lock.key span attribute and into error messages: a lock name
	// is often a business identifier ("card:" and a card number). The
	// zero value, plugintrace.RedactKey(), writes "[redacted]";
	// plugintrace.HashKey(secret) writes a keyed digest, the same for the
	// same name, so the spans of one contended lock can be found together;
	// plugintrace.RawKey() writes names as given.
	KeyAttribute plugintrace.KeyAttribute
	// AutoRenew renews held locks every TTL/3 until released, retrying
	// quickly when a renewal fails or stalls (see docs/locks.md for the
	// stalls it survives). Default off.
	AutoRenew bool
}

// ErrNotAcquired means the lock was held by someone else: Redis said so,
// and it stayed held for every attempt within Attempts and WaitTimeout.
var ErrNotAcquired = &redisfx.BaseError{Code: "lock_not_acquired", Message: "Failed to acquire lock"}

// ErrNotOwner means the lock is not held by this owner (any more): Redis
// no longer has it for this owner, or it was released already.
var ErrNotOwner = &redisfx.BaseError{Code: "lock_not_owner", Message: "lockfx: the lock is not held by this owner"}

// configError names the invalid field of Config.
func configError(field, reason string) error {
	return redisfx.NewConfigError("lockfx", "Config."+field, reason)
}

func (c Config) normalize() (Config, error) {
	if c.KeyPrefix == "" {
		c.KeyPrefix = "lock:"
	}
	for _, d := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{{"TTL", &c.TTL, 10 * time.Second}, {"Backoff", &c.Backoff, 25 * time.Millisecond},
		{"MaxBackoff", &c.MaxBackoff, 500 * time.Millisecond}, {"WaitTimeout", &c.WaitTimeout, 5 * time.Second}} {
		if *d.v < 0 {
			return c, configError(d.name, fmt.Sprintf("%v is negative", *d.v))
		}
		if *d.v == 0 {
			*d.v = d.def
		}
		if why := fxconfig.TooLong(*d.v); why != "" {
			// The arithmetic on them (the marker's TTL + 1 minute, the
			// backoff doubled) must not overflow into a negative duration.
			return c, configError(d.name, why)
		}
	}
	if c.TTL < 10*time.Millisecond {
		return c, configError("TTL", fmt.Sprintf("%v is shorter than 10ms: little or no validity would be left after the clock-drift margin", c.TTL))
	}
	if emptyHashTag(c.KeyPrefix) {
		return c, configError("KeyPrefix", fmt.Sprintf("%q has an empty hash tag {}: a lock and its fencing counter would hash to different Cluster slots", c.KeyPrefix))
	}
	if c.Attempts < 0 {
		return c, configError("Attempts", fmt.Sprintf("%d is negative", c.Attempts))
	}
	if c.Attempts == 0 {
		c.Attempts = 20
	}
	return c, nil
}

// Validate reports the first invalid option.
func (c Config) Validate() error { _, err := c.normalize(); return err }

// Locker acquires locks.
type Locker struct {
	cfg Config
	rdb redis.UniversalClient
	obs *observer
	// stopped ends the give-backs and renewals (Stop); bg waits for them;
	// mu orders a new one against Stop.
	stopped context.Context
	stop    context.CancelFunc
	mu      sync.Mutex
	bg      sync.WaitGroup
}

// New builds a Locker without Fx.
func New(rdb redis.UniversalClient, cfg Config, opts ...Option) (*Locker, error) {
	cfg, err := cfg.normalize()
	if err != nil {
		return nil, err
	}
	if err := clientcheck.HonoursDeadlines("lockfx", "Config.WaitTimeout", rdb); err != nil {
		return nil, err
	}
	var o options
	for _, f := range opts {
		f(&o)
	}
	obs, err := newObserver(o.registerer, o.tracer, cfg.KeyAttribute)
	if err != nil {
		return nil, err
	}
	stopped, stop := context.WithCancel(context.Background())
	return &Locker{cfg: cfg, rdb: rdb, obs: obs, stopped: stopped, stop: stop}, nil
}

// Start preloads the lock scripts, so that the first acquire pays no
// NOSCRIPT round trip. A failure is not fatal (scripts load on first use).
func (l *Locker) Start(ctx context.Context) error {
	_ = scripts.Preload(ctx, l.rdb, acquireScript, releaseScript, extendScript, abandonScript)
	return nil
}

// unanswered reports whether a call failed for want of Redis's answer in
// time: WaitTimeout ran out (callCtx), or the client's own ReadTimeout or
// WriteTimeout did (a net timeout), which is shorter by default.
func unanswered(callCtx context.Context, err error) bool {
	var ne net.Error
	return err != nil && (callCtx.Err() != nil || errors.As(err, &ne) && ne.Timeout())
}

// Acquire takes the lock called name, retrying with backoff within
// Attempts and WaitTimeout. It returns ErrNotAcquired when the lock stayed
// held (Redis said so, and WaitTimeout ran out, perhaps during a later
// call), ErrEmptyName for the empty name, the context's error when ctx
// ended, or a store error: among them, one wrapping
// context.DeadlineExceeded when an attempt got no answer in time (WaitTimeout,
// or the client's ReadTimeout, ran out) and Redis had not said the lock is
// held (nothing then says it is), or Redis granted it with an answer that
// came after the grant's validity had ended, and never said it is held.
//
// When a call may have taken the lock but its answer was not received (the
// caller gave up, the connection failed, or Redis answered a retry of it
// with an error), the lock is given back in the
// background, and the call is stopped from taking it should Redis run it
// later: a lock is never left held by an owner that gave up. Each attempt
// is an owner of its own, and an attempt told "held", like a released
// lock's acquire, is stopped the same way: a second send of it by go-redis
// (a retry after its ReadTimeout) that reaches Redis late takes nothing. The give-back
// is tried until Redis answers, through an open circuit breaker, for up to
// TTL + 1 minute, or until Stop.
func (l *Locker) Acquire(ctx context.Context, name string) (*Lock, error) {
	keys, err := l.keysOf(name)
	if err != nil {
		return nil, err
	}
	ctx, span := l.obs.startAcquire(ctx, name, l.cfg.TTL)
	began := time.Now()
	deadline := began.Add(l.cfg.WaitTimeout)
	// WaitTimeout bounds the Redis calls too, not only the waits between
	// them: a Redis that hangs cannot hold Acquire longer.
	callCtx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	backoff := l.cfg.Backoff
	held := false     // Redis answered at least once that another owner holds it
	late := false     // Redis granted it at least once, but answered after the validity
	var refused error // the latest TRYAGAIN: the lock's slot is migrating
	for attempt := 1; ; attempt++ {
		l.obs.attempt()
		// Each attempt is an owner of its own: an attempt that heard
		// "held", or gave up, leaves its owner's marker, which refuses
		// any later delivery of it (see acquireScript).
		owner := randid.Hex(16)
		sent := time.Now() // before the call: Redis starts the lease no earlier
		token, err := acquireScript.Run(callCtx, l.rdb, []string{keys.lock, keys.fence, keys.abandoned(owner)},
			owner, l.cfg.TTL.Milliseconds(), fenceTTL.Milliseconds(), l.markerTTL().Milliseconds()).Int64()
		if err != nil && !errors.Is(err, storefx.ErrCircuitOpen) {
			// The script may have run: the call failed, or Redis answered
			// an error to it, but go-redis retries a call whose answer was
			// lost, and the error may be the retry's (LOADING after a
			// restart, READONLY after a failover) while the first send
			// took the lock. Giving back an acquire that never ran only
			// leaves its owner's marker. A call the breaker refused was
			// never sent.
			l.abandon(keys, owner)
		}
		switch {
		case err != nil && ctx.Err() != nil:
			l.obs.endAcquire(span, false, attempt-1, time.Since(began), ctx.Err())
			return nil, ctx.Err()
		case unanswered(callCtx, err) && held:
			l.obs.timeout(span)
			l.obs.endAcquire(span, false, attempt-1, time.Since(began), ErrNotAcquired)
			return nil, ErrNotAcquired
		case unanswered(callCtx, err):
			// Redis never answered: nothing says the lock is held, so this
			// is a store error (the caller's policy for an outage applies),
			// not ErrNotAcquired.
			if errors.Is(err, context.DeadlineExceeded) {
				err = fmt.Errorf("lockfx: acquire %s: Redis did not answer in time: %w", l.cfg.KeyAttribute.Quote(name), err)
			} else {
				err = fmt.Errorf("lockfx: acquire %s: Redis did not answer in time: %w (%w)", l.cfg.KeyAttribute.Quote(name), context.DeadlineExceeded, err)
			}
			l.obs.timeout(span)
			l.obs.endAcquire(span, false, attempt-1, time.Since(began), err)
			return nil, err
		case slotMoving(err):
			// The lock's slot is migrating between Cluster nodes (the
			// script's keys are on both, or go-redis ran out of
			// redirections): Redis ran nothing. Tried again within
			// Attempts and WaitTimeout, as for "held".
			refused = fmt.Errorf("lockfx: acquire %s: %w", l.cfg.KeyAttribute.Quote(name), err)
		case err != nil:
			err = fmt.Errorf("lockfx: acquire %s: %w", l.cfg.KeyAttribute.Quote(name), err)
			l.obs.endAcquire(span, false, attempt-1, time.Since(began), err) // the span's exception is the error returned
			return nil, err
		case token > 0:
			if !time.Now().Before(sent.Add(l.cfg.TTL - driftMargin(l.cfg.TTL))) {
				// Granted, but the answer took the whole validity: of no
				// use. Give it back, at once if Redis answers (so that
				// the next attempt does not find it held by this very
				// owner), else in the background. Not a sign that anyone
				// else holds it.
				late = true
				if marked, err := abandonScript.Run(callCtx, l.rdb, []string{keys.lock, keys.abandoned(owner)}, owner, l.markerTTL().Milliseconds()).Int(); err != nil || marked == 0 {
					l.abandon(keys, owner)
				}
				break
			}
			lock := newLock(l, name, keys, owner, token, sent)
			l.obs.endAcquire(span, true, attempt-1, time.Since(began), nil)
			if l.cfg.AutoRenew {
				l.background(lock.renew)
			}
			return lock, nil
		}
		held = held || err == nil && token <= 0
		wait := backoff/2 + rand.N(backoff/2+1) // jitter: contenders spread out
		if attempt >= l.cfg.Attempts || time.Now().Add(wait).After(deadline) {
			var err error = ErrNotAcquired
			switch {
			case held:
			case late:
				// Redis only ever granted it, too slowly to be of use:
				// nothing says anyone else holds it.
				err = fmt.Errorf("lockfx: acquire %s: Redis granted the lock but answered after its validity ended: %w", l.cfg.KeyAttribute.Quote(name), context.DeadlineExceeded)
			case refused != nil:
				err = refused // a store error: nothing says anyone holds it
			}
			l.obs.timeout(span)
			l.obs.endAcquire(span, false, attempt-1, time.Since(began), err)
			return nil, err
		}
		l.obs.retry(span, attempt)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			l.obs.endAcquire(span, false, attempt-1, time.Since(began), ctx.Err())
			return nil, ctx.Err()
		case <-t.C:
		}
		backoff = min(backoff*2, l.cfg.MaxBackoff)
	}
}

// markerTTL is how long an owner's marker lives (see acquireScript).
func (l *Locker) markerTTL() time.Duration { return l.cfg.TTL + abandonedTTL }

// giveBackPause is the longest pause between two tries of a give-back that
// Redis refused at once (connections refused or reset: a restart, a
// partition that resets): short, because the acquire it gives up may be
// delivered the moment the network heals, and holds the lock until the
// give-back lands. Such a try costs no round trip.
const giveBackPause = 20 * time.Millisecond

// giveBackRefusedPause is the longest pause between two tries of a
// give-back that Redis answered with an error (loading after a restart, a
// read-only replica before a failover ends, a slot migrating between
// Cluster nodes): Redis is up and answering, so no try needs to be waiting
// the moment it recovers, and a give-back per failed acquire trying every
// 20 ms would load a Redis that refuses them all (an adversary measured
// 535 TRYAGAIN answers a second from one acquire's give-backs).
const giveBackRefusedPause = 500 * time.Millisecond

// errMarkerRefused is a give-back try whose marker Redis refused (see
// abandonScript).
var errMarkerRefused = errors.New("lockfx: the give-up marker was refused")

// Stop gives up the give-backs still trying (see Acquire) and waits for
// them until ctx ends. A lock that Redis grants later to such an acquire
// is held by nobody and expires at most TTL after, as a crashed holder's
// does. The Module calls it when the app stops; Acquire must not be
// called after it.
func (l *Locker) Stop(ctx context.Context) error {
	l.mu.Lock()
	l.stop()
	l.mu.Unlock()
	done := make(chan struct{})
	go func() { l.bg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// abandon gives up, in the background, an acquire by owner whose outcome
// is unknown (see abandonScript and giveBack).
func (l *Locker) abandon(keys lockKeys, owner string) {
	l.background(func() { l.giveBack(keys, owner) })
}

// background runs f on a goroutine that Stop waits for; after Stop it
// runs nothing: a lock left held then expires as a crashed holder's.
func (l *Locker) background(f func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped.Err() == nil {
		l.bg.Go(f)
	}
}

// giveBack runs abandonScript until Redis answers it. The acquire it gives
// up may still be run by Redis at any time (a stalled server reads it when
// it resumes), so the give-up marker must get there too, whatever the
// stall: each try has its own timeout, a new connection if need be, and
// goes through an open circuit breaker (the stall that lost the acquire's
// answer may have opened it). It stops trying after TTL + abandonedTTL (the
// marker's lifetime: an acquire run later than that may take the lock for
// one TTL anyway), when the client is closed, or at Stop.
func (l *Locker) giveBack(keys lockKeys, owner string) {
	deadline := time.Now().Add(l.cfg.TTL + abandonedTTL)
	perTry := min(max(l.cfg.TTL/renewTimeout, 100*time.Millisecond), time.Second)
	wait := min(l.cfg.Backoff, giveBackPause)
	for {
		began := time.Now()
		ctx, cancel := context.WithTimeout(storefx.BypassBreaker(l.stopped), perTry)
		marked, err := abandonScript.Run(ctx, l.rdb, []string{keys.lock, keys.abandoned(owner)}, owner, l.markerTTL().Milliseconds()).Int()
		cancel()
		if err == nil && marked == 0 {
			// Redis freed the lock if the acquire had taken it, but
			// refused the marker (out of memory): the acquire, delivered
			// later, could still take it. Tried again as a refusal.
			err = errMarkerRefused
		}
		if err == nil || errors.Is(err, redis.ErrClosed) || l.stopped.Err() != nil || time.Now().After(deadline) {
			return
		}
		if time.Since(began) >= perTry {
			// Timed out (a stalled Redis): try again at once, so that a try
			// is always waiting when Redis resumes and the lock, should the
			// acquire run first, is freed within a round trip.
			continue
		}
		if !ctxsleep.Sleep(l.stopped, wait) { // refused at once: back off
			return
		}
		var redisErr redis.Error
		if errors.As(err, &redisErr) || errors.Is(err, errMarkerRefused) {
			wait = min(max(wait, giveBackPause)*2, giveBackRefusedPause)
		} else { // Redis down: a connection refused or reset
			wait = min(wait*2, giveBackPause)
		}
	}
}

// WithLock runs fn while holding the lock called name, and releases it
// however fn leaves (return, panic, runtime.Goexit). fn's context is
// cancelled, with cause ErrLockLost, if the lock is lost while fn runs;
// WithLock then returns ErrLockLost (joined with fn's error, if any): fn's
// work may have overlapped another holder's, and only the fencing token
// (passed to fn) can make a downstream store refuse the late writes. An fn
// that never returns keeps an auto-renewed lock until Locker.Stop.
func (l *Locker) WithLock(ctx context.Context, name string, fn func(ctx context.Context, token int64) error) error {
	lock, err := l.Acquire(ctx, name)
	if err != nil {
		return err
	}
	return lock.do(ctx, fn)
}

// do is WithLock once the lock is held.
func (k *Lock) do(ctx context.Context, fn func(ctx context.Context, token int64) error) error {
	defer func() { _ = k.Release(context.WithoutCancel(ctx)) }()
	lockCtx, cancel := k.Context(ctx)
	defer cancel()
	err := fn(lockCtx, k.Token)
	if lost := k.Err(); lost != nil {
		return errors.Join(err, lost)
	}
	return err
}
