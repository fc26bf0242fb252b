package cachefx

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
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

// A load runs under a lease kept in the value's own key (one key: checked
// and replaced in one step on a Cluster): a hash {lease: token} living
// LoadGuardTTL, renewed while the loader runs. The value is stored only if
// the key still holds the lease: a write during the load replaced or
// deleted it. Reads see a leased key as missing.

// leaseScript takes the lease on KEYS[1] for ARGV[1] (token) and ARGV[2]
// milliseconds. It returns {value, pttl} if the key holds a value, 1 if the
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

// renewLeaseScript extends the lease if it is still ours.
var renewLeaseScript = redis.NewScript(`
if redis.call('TYPE', KEYS[1]).ok == 'hash' and redis.call('HGET', KEYS[1], 'lease') == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
`)

// storeLeasedScript replaces our lease by the loaded value ARGV[2] for
// ARGV[3] milliseconds; it returns 0 and stores nothing if the lease is no
// longer ours.
var storeLeasedScript = redis.NewScript(`
if redis.call('TYPE', KEYS[1]).ok == 'hash' and redis.call('HGET', KEYS[1], 'lease') == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return 1
end
return 0
`)

// releaseLeaseScript deletes the lease if it is still ours.
var releaseLeaseScript = redis.NewScript(`
if redis.call('TYPE', KEYS[1]).ok == 'hash' and redis.call('HGET', KEYS[1], 'lease') == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
`)

// GetOrLoad returns the cached value of key or, on a miss, runs load, stores
// its value for ttl (0: Config.DefaultTTL) with tags, and returns it.
//
// The loader runs once per key under a stampede: callers in this process
// share one load, and across processes a lease (Config.LoadGuardTTL) lets
// one process load while the others wait for its value, at most
// Config.LoadWait, before loading themselves without storing. Each caller
// that gets the value without running the loader counts in
// cache_stampede_prevented_total.
//
// A loaded value never overwrites a newer write: if Set, Delete or
// InvalidateByTags (of one of tags) touches key during the load, the value
// is returned but not stored.
//
// A caller's ctx bounds only its wait: the shared load goes on for the
// others. A caller whose ctx is done when its Get returns gets ctx's error
// and starts no load. A loader error is returned and nothing is cached; a
// panic or runtime.Goexit becomes an error. When Redis fails, GetOrLoad
// serves from the loader and returns no store error. A value above
// MaxValueBytes is returned with its *ValueTooLargeError, never stored.
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
		return c.load(context.WithoutCancel(ctx), key, ttl, c.guard(key, load), tags, storeDown)
	})
	select {
	case r := <-ch:
		if !ran && r.Err == nil {
			c.obs.stampedePrevented() // got the value another caller loaded (a failed load prevented nothing)
		}
		b, _ := r.Val.([]byte)
		return b, r.Err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// guard runs load in a goroutine of its own, so that every way it can end
// comes back as a return: a panic and runtime.Goexit become errors, and
// the flight's callers get them (a Goexit in the flight's goroutine would
// leave them waiting).
func (c *Cache) guard(key string, load Loader) Loader {
	return func(ctx context.Context) ([]byte, error) {
		type result struct {
			v   []byte
			err error
		}
		done := make(chan result, 1)
		go func() {
			var r result
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
		r := <-done
		return r.v, r.err
	}
}

// load runs in one goroutine per key and process, under a cache.load span
// that the lease's commands and the loader's own spans nest in.
func (c *Cache) load(ctx context.Context, key string, ttl time.Duration, load Loader, tags []string, storeDown bool) (v []byte, err error) {
	ctx, span := c.obs.start(ctx, "cache.load", "", c.ns, key)
	defer func() { finish(span, err) }()
	if storeDown {
		event(span, "store.unavailable")
		return c.loadUnstored(ctx, key, load)
	}
	full, token := c.valueKey(key), randid.Hex(16)
	deadline := time.Now().Add(c.cfg.LoadWait)
	pause := backoff.Backoff{Min: 2 * time.Millisecond, Max: 100 * time.Millisecond}
	for first := true; ; first = false {
		v, leased, err := c.takeLease(ctx, full, token)
		switch {
		case err != nil:
			event(span, "store.unavailable")
			return c.loadUnstored(ctx, key, load) // serve without caching
		case v != nil:
			event(span, "value.found") // another process stored it meanwhile
			if !first {
				c.obs.stampedePrevented() // waited for it instead of loading
			}
			return v, nil
		case leased:
			return c.loadLeased(ctx, span, key, ttl, load, tags, token)
		}
		if first {
			event(span, "load.waiting") // another process is loading this key
		}
		remaining := time.Until(deadline)
		if remaining <= 0 {
			event(span, "load.wait_expired")
			return c.loadUnstored(ctx, key, load) // it is taking too long: load, but leave storing to the lease holder
		}
		time.Sleep(min(pause.Next(), remaining))
	}
}

// loadUnstored runs the loader for a value that will not be stored (no
// lease, or Redis unreachable).
func (c *Cache) loadUnstored(ctx context.Context, key string, load Loader) ([]byte, error) {
	v, err := load(ctx)
	if err != nil {
		return nil, err
	}
	return v, c.tooLarge(key, len(v))
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
	switch r := res.(type) {
	case int64:
		return nil, r == 1, nil
	case []any:
		v, ttl, err := valueAndTTL(r, c.cfg.Local.TTL)
		if err != nil {
			return nil, false, err
		}
		if c.local != nil {
			c.local.fill(full, v, ttl, sent, seen)
		}
		return v, false, nil
	}
	return nil, false, fmt.Errorf("cachefx: unexpected lease reply %v", res)
}

// loadLeased runs the loader while holding the lease, then stores its
// value if the lease is still ours.
func (c *Cache) loadLeased(ctx context.Context, span *plugintrace.Span, key string, ttl time.Duration, load Loader, tags []string, token string) (v []byte, err error) {
	full := c.valueKey(key)
	event(span, "lease.acquired")
	stored := false
	defer func() {
		if !stored { // the loader failed or panicked, or its value was refused: let the next caller load
			sctx, cancel := c.storeCtx(ctx)
			_ = releaseLeaseScript.Run(sctx, c.rdb, []string{full}, token).Err()
			cancel()
		}
	}()
	if len(tags) > 0 {
		// Tagged before loading (as long as the lease lives), so that an
		// invalidation during the load deletes the lease.
		sctx, cancel := c.storeCtx(ctx)
		err := c.tag(sctx, key, c.cfg.LoadGuardTTL, tags)
		cancel()
		if err != nil {
			event(span, "store.unavailable")
			return c.loadUnstored(ctx, key, load) // a value in no tag set must not be stored
		}
	}
	stop := c.renewLease(ctx, key, token, tags)
	v, err = func() ([]byte, error) {
		defer stop()
		return load(ctx)
	}()
	if err != nil {
		return nil, err
	}
	if err := c.tooLarge(key, len(v)); err != nil {
		return v, err
	}
	stored = c.storeLeased(ctx, key, v, ttl, tags, token)
	if stored {
		event(span, "value.stored")
	} else {
		event(span, "value.discarded") // the key was written or deleted during the load
	}
	return v, nil
}

// renewLease keeps the lease, and key's place in its tag sets, alive while
// the loader runs; stop ends it.
func (c *Cache) renewLease(ctx context.Context, key, token string, tags []string) (stop func()) {
	full := c.valueKey(key)
	quit, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		tick := time.NewTicker(c.cfg.LoadGuardTTL / 3)
		defer tick.Stop()
		for {
			select {
			case <-quit:
				return
			case <-tick.C:
				sctx, cancel := c.storeCtx(ctx)
				if renewed, _ := renewLeaseScript.Run(sctx, c.rdb, []string{full}, token, c.cfg.LoadGuardTTL.Milliseconds()).Int(); renewed == 1 && len(tags) > 0 {
					_ = c.tag(sctx, key, c.cfg.LoadGuardTTL, tags)
				}
				cancel()
			}
		}
	}()
	return func() { close(quit); <-finished }
}

// storeLeased replaces the lease by v and puts key in its tag sets again
// (with v's full TTL). It reports whether v is stored.
func (c *Cache) storeLeased(ctx context.Context, key string, v []byte, ttl time.Duration, tags []string, token string) bool {
	full := c.valueKey(key)
	sctx, cancel := c.storeCtx(ctx)
	defer cancel()
	seen, sent := c.begin()
	store := &scriptCall{script: storeLeasedScript, keys: []string{full}, args: []any{token, v, ttl.Milliseconds()}}
	tagged := c.tagCalls(key, ttl, tags)
	if c.inOrder {
		_, _ = c.rdb.Pipelined(sctx, func(p redis.Pipeliner) error {
			queueAll(sctx, p, append([]*scriptCall{store}, tagged...))
			return nil
		})
		retryNoScript(sctx, c.rdb, append([]*scriptCall{store}, tagged...))
	} else {
		_, _ = c.rdb.Pipelined(sctx, func(p redis.Pipeliner) error { queueAll(sctx, p, []*scriptCall{store}); return nil })
		retryNoScript(sctx, c.rdb, []*scriptCall{store})
		if n, _ := store.cmd.Int(); n == 1 && len(tagged) > 0 {
			_, _ = c.rdb.Pipelined(sctx, func(p redis.Pipeliner) error { queueAll(sctx, p, tagged); return nil })
			retryNoScript(sctx, c.rdb, tagged)
		}
	}
	if n, err := store.cmd.Int(); err != nil || n != 1 {
		return false
	}
	if firstError(tagged) != nil { // its tag sets list key only for the lease's life
		c.dropUntagged(ctx, full)
		return false
	}
	if c.local != nil { // a copy: the loader may reuse its buffer
		c.local.wrote(full, bytes.Clone(v), ttl, sent, seen)
	}
	return true
}

// valueAndTTL decodes the {value, pttl} pair that leaseScript returns.
func valueAndTTL(res []any, noExpiry time.Duration) ([]byte, time.Duration, error) {
	if len(res) != 2 {
		return nil, 0, fmt.Errorf("cachefx: unexpected lease reply %v", res)
	}
	s, _ := res[0].(string)
	ms, _ := res[1].(int64)
	ttl := time.Duration(ms) * time.Millisecond
	if ms < 0 {
		ttl = noExpiry
	}
	return []byte(s), ttl, nil
}

// flightPart appends one name and its write count to a single-flight key:
// the name's length, the name, the count.
func flightPart(b []byte, name string, writes uint64) []byte {
	b = strconv.AppendInt(b, int64(len(name)), 10)
	b = append(b, ':')
	b = append(b, name...)
	b = strconv.AppendUint(b, writes, 10)
	return append(b, ';')
}
