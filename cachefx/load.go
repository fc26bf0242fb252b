package cachefx

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisfx/redisfx/internal/backoff"
	"github.com/redisfx/redisfx/internal/randid"
	"github.com/redisfx/redisfx/plugintrace"
)

// Loader produces the value of a key that is not cached. The cache keeps
// its own copy of the value, so a loader may reuse its buffer once it has
// returned; the callers of GetOrLoad that share the load get the slice it
// returned.
type Loader func(ctx context.Context) ([]byte, error)

// leaseScript takes the lease, a hash {lease: ARGV[1]} in the value's own
// key KEYS[1] (one key: one slot), for ARGV[2] milliseconds. It returns {value, pttl} if the key holds a value, 1 if the
// lease is ours (taken now, or already: a retried call), 0 if another
// loader holds it.
var leaseScript = redis.NewScript(`
local t = redis.call('TYPE', KEYS[1]).ok
if t == 'string' then return {redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1])} end
if t == 'none' then
  redis.call('HSET', KEYS[1], 'lease', ARGV[1])
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if t == 'hash' and redis.call('HGET', KEYS[1], 'lease') == ARGV[1] then return 1 end
return 0
`)

// leasedScript acts on KEYS[1] only while it holds our lease ARGV[1]:
// ARGV[2] "renew" extends it by ARGV[3] ms, "store" replaces it by the
// loaded value ARGV[3] for ARGV[4] ms, "release" deletes it. It returns 1,
// or 0 (doing nothing) if the lease is no longer ours.
var leasedScript = redis.NewScript(`
if redis.call('TYPE', KEYS[1]).ok ~= 'hash' or redis.call('HGET', KEYS[1], 'lease') ~= ARGV[1] then return 0 end
if ARGV[2] == 'renew' then redis.call('PEXPIRE', KEYS[1], ARGV[3])
elseif ARGV[2] == 'store' then redis.call('SET', KEYS[1], ARGV[3], 'PX', ARGV[4])
else redis.call('DEL', KEYS[1]) end
return 1
`)

// GetOrLoad returns the cached value of key or, on a miss, runs load, stores
// its value for ttl (0: Config.DefaultTTL) with tags, and returns it. The
// loader runs once per key across processes and its value never overwrites
// a write made during the load; a caller's ctx bounds only its wait. See
// docs/cache.md, "The stampede: one load per key".
func (c *Cache) GetOrLoad(ctx context.Context, key string, ttl time.Duration, load Loader, tags ...string) ([]byte, error) {
	ttl, err := c.ttlOrDefault(key, ttl)
	if err != nil {
		return nil, err
	}
	v, found, err := c.Get(ctx, key)
	if err == nil && found {
		return v, nil
	}
	if ctxErr := ctx.Err(); ctxErr != nil { // its failed Get says nothing about Redis
		return nil, ctxErr
	}
	storeDown := err != nil
	full := c.valueKey(key)
	// Callers share a load only with the same tags and no write of the key
	// or a tag between their starts (an older load may return older data).
	flight := flightPart(nil, full, c.writeCount(full).Load())
	for _, tag := range tags {
		tk := c.tagKey(tag)
		flight = flightPart(flight, tk, c.writeCount(tk).Load())
	}
	var ran bool // written only by the closure this caller passed, if it ran
	ch := c.loads.DoChan(string(flight), func() (any, error) {
		ran = true
		return c.load(context.WithoutCancel(ctx), key, ttl, load, tags, storeDown)
	})
	select {
	case r := <-ch:
		if !ran && r.Err == nil {
			c.obs.stampedes.Inc() // got the value another caller loaded (a failed load prevented nothing)
		}
		b, _ := r.Val.([]byte)
		return b, r.Err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

type loaded struct {
	v   []byte
	err error
}

// run runs load in a goroutine of its own, so that a panic or
// runtime.Goexit comes back as an error for the flight's callers (a Goexit
// in the flight's goroutine would leave them waiting).
func (c *Cache) run(ctx context.Context, key string, load Loader) <-chan loaded {
	done := make(chan loaded, 1)
	go func() {
		var r loaded
		returned := false
		defer func() {
			if p := recover(); p != nil {
				r.err = fmt.Errorf("cachefx: loader for %s panicked: %v", c.cfg.KeyAttribute.Quote(key), p)
			} else if !returned {
				r.err = fmt.Errorf("cachefx: loader for %s called runtime.Goexit", c.cfg.KeyAttribute.Quote(key))
			}
			done <- r
		}()
		r.v, r.err = load(ctx)
		returned = true
	}()
	return done
}

// load runs in one goroutine per key and process, under a cache.load span
// that the lease's commands and the loader's own spans nest in.
func (c *Cache) load(ctx context.Context, key string, ttl time.Duration, load Loader, tags []string, storeDown bool) (v []byte, err error) {
	ctx, span := c.obs.start(ctx, "cache.load", "", c.ns, key)
	defer func() { span.Finish(err) }()
	if storeDown {
		span.AddEvent("store.unavailable")
		return c.loadUnstored(ctx, key, load)
	}
	full, token := c.valueKey(key), randid.Hex(16)
	deadline := time.Now().Add(c.cfg.LoadWait)
	pause := backoff.Backoff{Min: 2 * time.Millisecond, Max: 100 * time.Millisecond}
	for first := true; ; first = false {
		v, leased, err := c.takeLease(ctx, full, token)
		switch {
		case err != nil:
			span.AddEvent("store.unavailable")
			return c.loadUnstored(ctx, key, load) // serve without caching
		case v != nil:
			span.AddEvent("value.found") // another process stored it meanwhile
			if !first {
				c.obs.stampedes.Inc() // waited for it instead of loading
			}
			return v, nil
		case leased:
			return c.loadLeased(ctx, span, key, ttl, load, tags, token)
		}
		if first {
			span.AddEvent("load.waiting") // another process is loading this key
		}
		remaining := time.Until(deadline)
		if remaining <= 0 {
			span.AddEvent("load.wait_expired")
			return c.loadUnstored(ctx, key, load) // it is taking too long: load, but leave storing to the lease holder
		}
		time.Sleep(min(pause.Next(), remaining))
	}
}

// loadUnstored runs the loader for a value that will not be stored (no
// lease, or Redis unreachable).
func (c *Cache) loadUnstored(ctx context.Context, key string, load Loader) ([]byte, error) {
	r := <-c.run(ctx, key, load)
	if r.err != nil {
		return nil, r.err
	}
	return r.v, c.tooLarge(key, len(r.v))
}

// takeLease runs leaseScript: the value if the key holds one (kept in the
// first layer), or whether the lease is now ours.
func (c *Cache) takeLease(ctx context.Context, full, token string) ([]byte, bool, error) {
	sctx, cancel := c.storeCtx(ctx)
	defer cancel()
	seen, sent := c.begin()
	res, err := leaseScript.Run(sctx, c.rdb, []string{full}, token, c.cfg.LoadGuardTTL.Milliseconds()).Result()
	if err != nil {
		return nil, false, err
	}
	if r, ok := res.([]any); ok && len(r) == 2 {
		s, _ := r[0].(string)
		pttl, _ := r[1].(int64)
		if c.local != nil {
			c.local.fill(full, []byte(s), c.lifeLeft(pttl), sent, seen, false)
		}
		return []byte(s), false, nil
	}
	n, _ := res.(int64)
	return nil, n == 1, nil
}

// lifeLeft is how long the first layer may keep a value whose PTTL (in
// ms) is pttl: the layer's own TTL without an expiry, 0 (not kept) when
// the key is gone.
func (c *Cache) lifeLeft(pttl int64) time.Duration {
	if pttl == -1 {
		return c.cfg.Local.TTL
	}
	return time.Duration(pttl) * time.Millisecond
}

// leased runs leasedScript's op on full while the lease is ours.
func (c *Cache) leased(full, token, op string, args ...any) *scriptCall {
	return &scriptCall{script: leasedScript, keys: []string{full}, args: append([]any{token, op}, args...)}
}

// loadLeased runs the loader while holding the lease, then stores its
// value if the lease is still ours.
func (c *Cache) loadLeased(ctx context.Context, span *plugintrace.Span, key string, ttl time.Duration, load Loader, tags []string, token string) (v []byte, err error) {
	full := c.valueKey(key)
	span.AddEvent("lease.acquired")
	stored := false
	defer func() {
		if !stored { // the loader failed or panicked, or its value was refused: let the next caller load
			sctx, cancel := c.storeCtx(ctx)
			_ = runCalls(sctx, c.rdb, c.leased(full, token, "release"))
			cancel()
		}
	}()
	if len(tags) > 0 {
		// Tagged before loading (as long as the lease lives), so that an
		// invalidation during the load deletes the lease.
		sctx, cancel := c.storeCtx(ctx)
		err := runCalls(sctx, c.rdb, c.tagCalls(key, c.cfg.LoadGuardTTL, tags)...)
		cancel()
		if err != nil {
			span.AddEvent("store.unavailable")
			return c.loadUnstored(ctx, key, load) // a value in no tag set must not be stored
		}
	}
	done := c.run(ctx, key, load)
	tick := time.NewTicker(c.cfg.LoadGuardTTL / 3)
	defer tick.Stop()
	r, finished := loaded{}, false
	for !finished {
		select {
		case r, finished = <-done:
		case <-tick.C:
			c.renewLease(ctx, key, token, tags)
		}
	}
	if r.err != nil {
		return nil, r.err
	}
	v = r.v
	if err := c.tooLarge(key, len(v)); err != nil {
		return v, err
	}
	stored = c.storeLeased(ctx, key, v, ttl, tags, token)
	if stored {
		span.AddEvent("value.stored")
	} else {
		span.AddEvent("value.discarded") // the key was written or deleted during the load
	}
	return v, nil
}

// renewLease keeps the lease, and key's place in its tag sets, alive while
// the loader runs.
func (c *Cache) renewLease(ctx context.Context, key, token string, tags []string) {
	sctx, cancel := c.storeCtx(ctx)
	defer cancel()
	renew := c.leased(c.valueKey(key), token, "renew", c.cfg.LoadGuardTTL.Milliseconds())
	_ = runCalls(sctx, c.rdb, renew)
	if n, _ := renew.cmd.Int(); n == 1 {
		_ = runCalls(sctx, c.rdb, c.tagCalls(key, c.cfg.LoadGuardTTL, tags)...)
	}
}

// storeLeased replaces the lease by v and puts key in its tag sets again
// (with v's full TTL). It reports whether v is stored.
func (c *Cache) storeLeased(ctx context.Context, key string, v []byte, ttl time.Duration, tags []string, token string) bool {
	full := c.valueKey(key)
	sctx, cancel := c.storeCtx(ctx)
	defer cancel()
	seen, sent := c.begin()
	store := c.leased(full, token, "store", v, ttl.Milliseconds())
	_ = runCalls(sctx, c.rdb, store)
	if n, err := store.cmd.Int(); err != nil || n != 1 {
		return false
	}
	if runCalls(sctx, c.rdb, c.tagCalls(key, ttl, tags)...) != nil { // its tag sets list key only for the lease's life
		c.dropUntagged(ctx, full)
		return false
	}
	if c.local != nil { // a copy: the loader may reuse its buffer
		c.local.fill(full, bytes.Clone(v), ttl, sent, seen, true)
	}
	return true
}

// flightPart appends one name and its write count to a single-flight key:
// the name's length, the name, the count.
func flightPart(b []byte, name string, writes uint64) []byte {
	return fmt.Appendf(b, "%d:%s%d;", len(name), name, writes)
}
