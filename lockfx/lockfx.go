package lockfx

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/redisfx/redisfx"
	"github.com/redisfx/redisfx/internal/backoff"
	"github.com/redisfx/redisfx/internal/clientcheck"
	"github.com/redisfx/redisfx/internal/durations"
	"github.com/redisfx/redisfx/internal/plugin"
	"github.com/redisfx/redisfx/internal/randid"
	"github.com/redisfx/redisfx/internal/scripts"
	"github.com/redisfx/redisfx/plugintrace"
	"github.com/redisfx/redisfx/storefx"
)

// Config holds the lock options. Zero fields take the defaults.
type Config struct {
	// KeyPrefix is put before the lock name. Default "lock:".
	KeyPrefix string
	// TTL is the lease of a lock: it expires this long after the last
	// acquire, extend or renewal. At least 10ms. Default 10s.
	TTL time.Duration
	// Attempts is the most tries of one Acquire (1 = no retry). Default 20.
	Attempts int
	// Backoff is the wait before the first retry; it doubles up to
	// MaxBackoff, with jitter. Defaults 25ms and 500ms.
	Backoff    time.Duration
	MaxBackoff time.Duration
	// WaitTimeout bounds the whole Acquire, retries included. Default 5s.
	WaitTimeout time.Duration
	// KeyAttribute is how lock names are written into spans and errors.
	// Default: redacted (plugintrace.RedactKey).
	KeyAttribute plugintrace.KeyAttribute
	// AutoRenew renews held locks every TTL/3 until released or Locker.Stop
	// (docs/locks.md, "Renewal"). Default off.
	AutoRenew bool
}

// ErrNotAcquired means the lock was held by someone else: Redis said so,
// and it stayed held for every attempt within Attempts and WaitTimeout.
var ErrNotAcquired = &redisfx.BaseError{Code: "lock_not_acquired", Message: "Failed to acquire lock"}

// ErrNotOwner means the lock is not held by this owner (any more): Redis
// no longer has it for this owner, or it was released already.
var ErrNotOwner = &redisfx.BaseError{Code: "lock_not_owner", Message: "lockfx: the lock is not held by this owner"}

func configError(field, reason string) error {
	return redisfx.NewConfigError("lockfx", "Config."+field, reason)
}

func (c Config) normalize() (Config, error) {
	c.KeyPrefix = cmp.Or(c.KeyPrefix, "lock:")
	c.TTL = cmp.Or(c.TTL, 10*time.Second)
	c.Attempts = cmp.Or(c.Attempts, 20)
	c.Backoff = cmp.Or(c.Backoff, 25*time.Millisecond)
	c.MaxBackoff = cmp.Or(c.MaxBackoff, 500*time.Millisecond)
	c.WaitTimeout = cmp.Or(c.WaitTimeout, 5*time.Second)
	if c.TTL < 10*time.Millisecond {
		return c, configError("TTL", fmt.Sprintf("%v is shorter than 10ms: little or no validity would be left after the clock-drift margin", c.TTL))
	}
	if emptyHashTag(c.KeyPrefix) {
		return c, configError("KeyPrefix", fmt.Sprintf("%q has an empty hash tag {}: a lock and its fencing counter would hash to different Cluster slots", c.KeyPrefix))
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
	// stopped ends the background work (give-backs, renewals) at Stop; bg
	// waits for it; mu orders new work against Stop.
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
	o := plugin.Apply("locks", plugin.Options{}, opts...)
	obs, err := newObserver(o.Registerer, o.Tracer, cfg.KeyAttribute)
	if err != nil {
		return nil, err
	}
	stopped, stop := context.WithCancel(context.Background())
	return &Locker{cfg: cfg, rdb: rdb, obs: obs, stopped: stopped, stop: stop}, nil
}

// Start preloads the lock scripts. A failure is not fatal.
func (l *Locker) Start(ctx context.Context) error {
	_ = scripts.Preload(ctx, l.rdb, acquireScript, releaseScript, extendScript, abandonScript)
	return nil
}

// Stop ends the give-backs still trying (see Acquire) and the renewals of
// held locks, and waits for them until ctx ends. A lock left held then
// expires at most TTL later, as a crashed holder's does. The Module calls
// it when the app stops; Acquire must not be called after it.
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

// background runs f on a goroutine that Stop waits for; after Stop, nothing.
func (l *Locker) background(f func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped.Err() == nil {
		l.bg.Go(f)
	}
}

// The outcomes of an answered attempt that did not take the lock.
var (
	errHeld = errors.New("held")
	errLate = errors.New("granted after its validity ended")
)

// Acquire takes the lock called name, retrying with backoff within
// Attempts and WaitTimeout. It returns ErrNotAcquired when Redis said the
// lock is held and it stayed held, ErrEmptyName for "", ctx's error when
// ctx ended, or a store error: one wrapping context.DeadlineExceeded when
// an attempt got no answer in time or a grant came after its validity
// ended, and Redis never said the lock is held. An attempt whose outcome
// is unknown is given back in the background.
func (l *Locker) Acquire(ctx context.Context, name string) (lock *Lock, err error) {
	keys, err := l.keysOf(name)
	if err != nil {
		return nil, err
	}
	ctx, span := l.obs.start(ctx, name, "lock.acquire", "SET", attribute.Int64(AttrTTL, l.cfg.TTL.Milliseconds()))
	began, attempt, timedOut := time.Now(), 0, false
	defer func() { l.obs.endAcquire(span, lock != nil, timedOut, attempt-1, time.Since(began), err) }()
	deadline := began.Add(l.cfg.WaitTimeout)
	callCtx, cancel := context.WithDeadline(ctx, deadline) // bounds the Redis calls too
	defer cancel()
	st := attempts{quoted: l.cfg.KeyAttribute.Quote(name)}
	pause := backoff.Backoff{Min: l.cfg.Backoff, Max: l.cfg.MaxBackoff}
	for attempt = 1; ; attempt++ {
		l.obs.attempts.Inc()
		if lock, err = l.try(callCtx, keys, name); err == nil {
			if l.cfg.AutoRenew {
				l.background(lock.renew)
			}
			return lock, nil
		}
		if timedOut, err = st.failed(ctx, callCtx, err); err != nil {
			return nil, err
		}
		wait := pause.Next()
		if attempt >= l.cfg.Attempts || time.Now().Add(wait).After(deadline) {
			timedOut = true
			return nil, st.exhausted()
		}
		span.AddEvent("lock.retry", trace.WithAttributes(attribute.Int("attempt", attempt)))
		if !backoff.Sleep(ctx, wait) {
			return nil, ctx.Err()
		}
	}
}

// attempts is what Acquire's failed attempts have heard.
type attempts struct {
	quoted     string
	held, late bool  // Redis said another owner holds it; granted it too late
	refused    error // the latest slot-migration refusal: Redis ran nothing
}

// failed records a failed attempt; it returns the error Acquire ends with,
// or nil to try again.
func (a *attempts) failed(ctx, callCtx context.Context, err error) (timedOut bool, end error) {
	switch {
	case errors.Is(err, errHeld):
		a.held = true
	case errors.Is(err, errLate):
		a.late = true
	case ctx.Err() != nil:
		return false, ctx.Err()
	case unanswered(callCtx, err):
		if a.held {
			return true, ErrNotAcquired
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("%w (%w)", context.DeadlineExceeded, err)
		}
		return true, fmt.Errorf("lockfx: acquire %s: Redis did not answer in time: %w", a.quoted, err)
	case slotMoving(err):
		a.refused = fmt.Errorf("lockfx: acquire %s: %w", a.quoted, err)
	default:
		return false, fmt.Errorf("lockfx: acquire %s: %w", a.quoted, err)
	}
	return false, nil
}

// exhausted is Acquire's error when no attempt is left.
func (a *attempts) exhausted() error {
	switch {
	case a.held:
	case a.late:
		return fmt.Errorf("lockfx: acquire %s: Redis granted the lock but answered after its validity ended: %w", a.quoted, context.DeadlineExceeded)
	case a.refused != nil:
		return a.refused
	}
	return ErrNotAcquired
}

// try is one attempt, by a new owner.
func (l *Locker) try(ctx context.Context, keys lockKeys, name string) (*Lock, error) {
	owner := randid.Hex(16)
	sent := time.Now() // Redis starts the lease no earlier
	token, err := acquireScript.Run(ctx, l.rdb, []string{keys.lock, keys.fence, keys.abandoned(owner)},
		owner, l.cfg.TTL.Milliseconds(), fenceTTL.Milliseconds(), l.markerTTL().Milliseconds()).Int64()
	switch {
	case err != nil:
		if !errors.Is(err, storefx.ErrCircuitOpen) { // a call the breaker refused was never sent
			l.abandon(keys, owner)
		}
		return nil, err
	case token <= 0:
		return nil, errHeld
	case !time.Now().Before(sent.Add(l.cfg.TTL - driftMargin(l.cfg.TTL))):
		// Of no use: given back at once if Redis answers, so that the next
		// attempt does not find it held by this owner, else in the background.
		marked, err := abandonScript.Run(ctx, l.rdb, []string{keys.lock, keys.abandoned(owner)}, owner, l.markerTTL().Milliseconds()).Int()
		if err != nil || marked == 0 {
			l.abandon(keys, owner)
		}
		return nil, errLate
	}
	return newLock(l, name, keys, owner, token, sent), nil
}

// unanswered reports whether a call failed for want of Redis's answer in
// time: WaitTimeout (callCtx) or the client's Read/WriteTimeout ran out.
func unanswered(callCtx context.Context, err error) bool {
	var ne net.Error
	return callCtx.Err() != nil || errors.As(err, &ne) && ne.Timeout()
}

// markerTTL is how long an owner's marker lives (see acquireScript).
func (l *Locker) markerTTL() time.Duration { return durations.Add(l.cfg.TTL, abandonedTTL) }

// errMarkerRefused is a give-back whose marker Redis refused (out of memory).
var errMarkerRefused = errors.New("lockfx: the give-up marker was refused")

// abandon gives up, in the background, a call of owner's whose outcome is unknown.
func (l *Locker) abandon(keys lockKeys, owner string) {
	l.background(func() { l.giveBack(keys, owner) })
}

// giveBack runs abandonScript, through an open breaker, until Redis answers
// it (the acquire it gives up may still run when a stalled server resumes),
// the marker's lifetime ends, the client closes or the Locker stops.
func (l *Locker) giveBack(keys lockKeys, owner string) {
	deadline := time.Now().Add(l.markerTTL())
	perTry := min(max(l.cfg.TTL/renewTimeout, 100*time.Millisecond), time.Second)
	down := backoff.Backoff{Min: min(l.cfg.Backoff, 20*time.Millisecond), Max: 20 * time.Millisecond}
	refused := backoff.Backoff{Min: 40 * time.Millisecond, Max: 500 * time.Millisecond}
	for {
		began := time.Now()
		ctx, cancel := context.WithTimeout(storefx.BypassBreaker(l.stopped), perTry)
		marked, err := abandonScript.Run(ctx, l.rdb, []string{keys.lock, keys.abandoned(owner)}, owner, l.markerTTL().Milliseconds()).Int()
		cancel()
		if err == nil && marked == 0 {
			err = errMarkerRefused // the lock is freed, but a late acquire could still take it
		}
		if err == nil || errors.Is(err, redis.ErrClosed) || l.stopped.Err() != nil || time.Now().After(deadline) {
			return
		}
		if time.Since(began) >= perTry {
			continue
		}
		pause := &down
		if errors.As(err, new(redis.Error)) || errors.Is(err, errMarkerRefused) {
			pause = &refused
		}
		if !pause.Wait(l.stopped) {
			return
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
