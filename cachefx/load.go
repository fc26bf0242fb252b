package cachefx

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisfx/redisfx/internal/randid"
)

// Loader produces the value of a key that is not cached.
type Loader func(ctx context.Context) ([]byte, error)

// releaseGuardScript deletes a load guard only if it is still ours.
var releaseGuardScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`)

// GetOrLoad returns the cached value of key or, on a miss, runs load, stores
// its value for ttl (0: Config.DefaultTTL) with tags, and returns it.
//
// The loader runs once per key under a stampede: callers in this process
// share one load (single flight), and across processes a short guard key
// (Config.LoadGuardTTL) lets one process load while the others wait for its
// value, at most Config.LoadWait, before loading themselves. Each caller
// that waits instead of loading counts in cache_stampede_prevented_total.
//
// The shared load is not cancelled when the caller that started it gives
// up, so that the others still get its value; a caller's own ctx bounds only
// its wait. A loader error is returned and nothing is cached; a loader panic
// becomes an error. When Redis fails, GetOrLoad serves from the loader
// (single flight still applies) and returns no store error: a cache outage
// costs load, not availability. A value above MaxValueBytes is returned
// together with its *ValueTooLargeError.
func (c *Cache) GetOrLoad(ctx context.Context, key string, ttl time.Duration, load Loader, tags ...string) ([]byte, error) {
	v, found, err := c.Get(ctx, key)
	if err == nil && found {
		return v, nil
	}
	storeDown := err != nil
	var ran bool // written only by the closure this caller passed, if it ran
	ch := c.loads.DoChan(c.valueKey(key), func() (v any, err error) {
		ran = true
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("cachefx: loader for %q panicked: %v", key, p)
			}
		}()
		return c.load(context.WithoutCancel(ctx), key, ttl, load, tags, storeDown)
	})
	select {
	case r := <-ch:
		if !ran {
			c.obs.stampedePrevented()
		}
		b, _ := r.Val.([]byte)
		return b, r.Err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// load runs in one goroutine per key and process: it takes the
// distributed guard and loads, or waits for the process holding it.
func (c *Cache) load(ctx context.Context, key string, ttl time.Duration, load Loader, tags []string, storeDown bool) ([]byte, error) {
	if storeDown {
		return load(ctx)
	}
	guard, token := c.guardKey(key), randid.Hex(16)
	deadline := time.Now().Add(c.cfg.LoadWait)
	backoff := 2 * time.Millisecond
	for first := true; ; first = false {
		sctx, cancel := c.storeCtx(ctx)
		took, err := c.rdb.SetNX(sctx, guard, token, c.cfg.LoadGuardTTL).Result()
		cancel()
		if err != nil {
			return load(ctx) // store failing: serve without caching
		}
		if took {
			defer func() {
				sctx, cancel := c.storeCtx(ctx)
				_ = releaseGuardScript.Run(sctx, c.rdb, []string{guard}, token).Err()
				cancel()
			}()
			// Another process may have stored the value between our miss
			// and our guard.
			if v, found := c.peek(ctx, key); found {
				return v, nil
			}
			return c.loadAndStore(ctx, key, ttl, load, tags)
		}
		if first {
			c.obs.stampedePrevented() // another process is loading this key
		}
		remaining := time.Until(deadline)
		if remaining <= 0 {
			return c.loadAndStore(ctx, key, ttl, load, tags) // it is taking too long: load ourselves
		}
		time.Sleep(min(backoff, remaining))
		backoff = min(backoff*2, 100*time.Millisecond)
		if v, found := c.peek(ctx, key); found {
			return v, nil
		}
	}
}

func (c *Cache) loadAndStore(ctx context.Context, key string, ttl time.Duration, load Loader, tags []string) ([]byte, error) {
	v, err := load(ctx)
	if err != nil {
		return nil, err
	}
	if err := c.Set(ctx, key, v, ttl, tags...); err != nil {
		var tooLarge *ValueTooLargeError
		if errors.As(err, &tooLarge) {
			return v, err
		}
	}
	return v, nil
}

// peek reads the value from Redis without counting a hit or a miss (the
// caller's Get already counted its miss).
func (c *Cache) peek(ctx context.Context, key string) ([]byte, bool) {
	sctx, cancel := c.storeCtx(ctx)
	defer cancel()
	v, err := c.rdb.Get(sctx, c.valueKey(key)).Bytes()
	return v, err == nil
}
