// Package lockfx is a distributed lock on Redis as an Fx module: acquire
// with a TTL and a retry policy, release and extend only by the owner,
// optional automatic renewal while held, and a fencing token the holder
// passes to downstream writes so that a stale holder's writes can be
// refused. Operations are traced (lock.acquire, lock.release) and measured.
package lockfx

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisfx/redisfx"
	"github.com/redisfx/redisfx/internal/randid"
	"github.com/redisfx/redisfx/internal/scripts"
)

// Config holds the lock options. Zero fields take the defaults.
type Config struct {
	// KeyPrefix is put before the lock name. Default "lock:".
	KeyPrefix string
	// TTL is the lease of a lock: it expires this long after the last
	// acquire, extend or renewal. Default 10s.
	TTL time.Duration
	// Attempts is the most tries of one Acquire (1 = no retry). Default 20.
	Attempts int
	// Backoff is the wait before the first retry; it doubles up to
	// MaxBackoff, with jitter. Defaults 25ms and 500ms.
	Backoff    time.Duration
	MaxBackoff time.Duration
	// WaitTimeout bounds the whole Acquire, retries included. Default 5s.
	WaitTimeout time.Duration
	// AutoRenew renews held locks every TTL/3 until released. Default off.
	AutoRenew bool
}

// ErrNotAcquired: the lock was held by someone else for every attempt.
var ErrNotAcquired = &redisfx.BaseError{Code: "lock_not_acquired", Message: "Failed to acquire lock"}

// ErrNotOwner: release or extend by someone who does not hold the lock
// (any more).
var ErrNotOwner = &redisfx.BaseError{Code: "lock_not_owner", Message: "the lock is not held by this owner"}

// ConfigError names the invalid option.
type ConfigError struct{ Option, Reason string }

// Error implements error.
func (e *ConfigError) Error() string { return "lockfx: invalid Config." + e.Option + ": " + e.Reason }

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
			return c, &ConfigError{d.name, fmt.Sprintf("%v is negative", *d.v)}
		}
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	if c.TTL < time.Millisecond {
		return c, &ConfigError{"TTL", "below Redis's 1ms resolution"}
	}
	if c.Attempts < 0 {
		return c, &ConfigError{"Attempts", fmt.Sprintf("%d is negative", c.Attempts)}
	}
	if c.Attempts == 0 {
		c.Attempts = 20
	}
	return c, nil
}

// Validate reports the first invalid option.
func (c Config) Validate() error { _, err := c.normalize(); return err }

// acquireScript: KEYS[1] lock, KEYS[2] its fencing counter (same slot);
// ARGV owner, ttl ms. Returns the fencing token, or 0 when held.
var acquireScript = redis.NewScript(`
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local n = redis.call('INCR', KEYS[2])
  redis.call('PEXPIRE', KEYS[2], 604800000)
  return n
end
return 0
`)

// releaseScript: delete only if still owned. Returns 1 or 0.
var releaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
`)

// extendScript: set the TTL only if still owned. Returns 1 or 0.
var extendScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
`)

// Locker acquires locks.
type Locker struct {
	cfg Config
	rdb redis.UniversalClient
	obs *observer
}

// New builds a Locker without Fx.
func New(rdb redis.UniversalClient, cfg Config, opts ...Option) (*Locker, error) {
	cfg, err := cfg.normalize()
	if err != nil {
		return nil, err
	}
	var o options
	for _, f := range opts {
		f(&o)
	}
	obs, err := newObserver(o.registerer, o.tracer)
	if err != nil {
		return nil, err
	}
	return &Locker{cfg: cfg, rdb: rdb, obs: obs}, nil
}

// Start preloads the lock scripts, so that the first acquire pays no
// NOSCRIPT round trip. A failure is not fatal (scripts load on first use).
func (l *Locker) Start(ctx context.Context) error {
	_ = scripts.Preload(ctx, l.rdb, acquireScript, releaseScript, extendScript)
	return nil
}

// Lock is a held lock.
type Lock struct {
	l     *Locker
	name  string
	key   string
	owner string
	// Token is the fencing token: it grows with every acquisition of this
	// name, so a downstream store can refuse writes with an older token.
	Token int64

	mu       sync.Mutex
	renewing *time.Timer
	released bool
}

func (l *Locker) keys(name string) []string {
	k := l.cfg.KeyPrefix + "{" + name + "}"
	return []string{k, k + ":fence"}
}

// Acquire takes the lock called name, retrying with backoff within
// Attempts and WaitTimeout. It returns ErrNotAcquired when the lock stayed
// held, or a store error.
func (l *Locker) Acquire(ctx context.Context, name string) (*Lock, error) {
	keys := l.keys(name)
	owner := randid.Hex(16)
	ctx, span := l.obs.startAcquire(ctx, name, l.cfg.TTL)
	began := time.Now()
	deadline := began.Add(l.cfg.WaitTimeout)
	// WaitTimeout bounds the Redis calls too, not only the waits between
	// them: a Redis that hangs cannot hold Acquire longer.
	callCtx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	backoff := l.cfg.Backoff
	for attempt := 1; ; attempt++ {
		l.obs.attempt()
		token, err := acquireScript.Run(callCtx, l.rdb, keys, owner, l.cfg.TTL.Milliseconds()).Int64()
		if err != nil && ctx.Err() == nil && callCtx.Err() != nil {
			// WaitTimeout ran out during the call. It may still have taken
			// the lock on Redis: give it back (best effort) rather than
			// leave it held for a whole TTL by an owner who gave up.
			rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), l.cfg.WaitTimeout)
			_ = releaseScript.Run(rctx, l.rdb, keys[:1], owner).Err()
			rcancel()
			l.obs.timeout(span)
			l.obs.endAcquire(span, false, attempt-1, time.Since(began), ErrNotAcquired)
			return nil, ErrNotAcquired
		}
		if err != nil {
			l.obs.endAcquire(span, false, attempt-1, time.Since(began), err)
			return nil, fmt.Errorf("lockfx: acquire %q: %w", name, err)
		}
		if token > 0 {
			lock := &Lock{l: l, name: name, key: keys[0], owner: owner, Token: token}
			l.obs.endAcquire(span, true, attempt-1, time.Since(began), nil)
			if l.cfg.AutoRenew {
				lock.scheduleRenewal()
			}
			return lock, nil
		}
		wait := backoff/2 + rand.N(backoff/2+1) // jitter: contenders spread out
		if attempt >= l.cfg.Attempts || time.Now().Add(wait).After(deadline) {
			l.obs.timeout(span)
			l.obs.endAcquire(span, false, attempt-1, time.Since(began), ErrNotAcquired)
			return nil, ErrNotAcquired
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

// WithLock runs fn while holding the lock called name, and releases it
// afterwards (also when fn panics). fn's context carries nothing new; the
// lock's fencing token is passed to it.
func (l *Locker) WithLock(ctx context.Context, name string, fn func(ctx context.Context, token int64) error) error {
	lock, err := l.Acquire(ctx, name)
	if err != nil {
		return err
	}
	defer func() { _ = lock.Release(context.WithoutCancel(ctx)) }()
	return fn(ctx, lock.Token)
}

// Release gives the lock up. ErrNotOwner means it had expired (and maybe
// been taken by someone else) before.
func (k *Lock) Release(ctx context.Context) error {
	k.mu.Lock()
	k.released = true
	if k.renewing != nil {
		k.renewing.Stop()
	}
	k.mu.Unlock()
	ctx, span := k.l.obs.startRelease(ctx, k.name)
	n, err := releaseScript.Run(ctx, k.l.rdb, []string{k.key}, k.owner).Int()
	switch {
	case err != nil:
		err = fmt.Errorf("lockfx: release %q: %w", k.name, err)
	case n == 0:
		err = ErrNotOwner
	}
	k.l.obs.endRelease(span, err)
	return err
}

// Extend sets the lock's TTL anew (ttl 0: the configured TTL).
func (k *Lock) Extend(ctx context.Context, ttl time.Duration) error {
	if ttl <= 0 {
		ttl = k.l.cfg.TTL
	}
	n, err := extendScript.Run(ctx, k.l.rdb, []string{k.key}, k.owner, ttl.Milliseconds()).Int()
	if err != nil {
		return fmt.Errorf("lockfx: extend %q: %w", k.name, err)
	}
	if n == 0 {
		return ErrNotOwner
	}
	return nil
}

func (k *Lock) scheduleRenewal() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.released {
		return
	}
	k.renewing = time.AfterFunc(k.l.cfg.TTL/3, func() {
		ctx, cancel := context.WithTimeout(context.Background(), k.l.cfg.TTL/3)
		err := k.Extend(ctx, 0)
		cancel()
		if errors.Is(err, ErrNotOwner) {
			return // lost: nothing left to renew
		}
		k.scheduleRenewal()
	})
}
