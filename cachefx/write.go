package cachefx

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisfx/redisfx"
)

// Writes change Redis first and the first layer after (moving its epoch,
// so no overlapping read keeps its value), then tell the other processes
// (same pipeline on one server, after it on a Cluster). After an error the
// change may have reached Redis: the keys are dropped here and the others
// told if Redis still answers.

// ErrNotPublished wraps the error of a write that reached Redis but whose
// invalidation message did not: other processes' first layers may keep
// the older value until their proof of subscription lapses or Local.TTL.
var ErrNotPublished = errors.New("cachefx: written, but other processes were not told")

func (c *Cache) tooLarge(key string, size int) error {
	if size <= c.cfg.MaxValueBytes {
		return nil
	}
	return &ValueTooLargeError{
		BaseError: redisfx.BaseError{Code: "cache_value_too_large", Message: fmt.Sprintf("cache value for %s is %d bytes, above MaxValueBytes %d", c.cfg.KeyAttribute.Quote(key), size, c.cfg.MaxValueBytes)},
		Key:       key, Size: size, Max: c.cfg.MaxValueBytes,
	}
}

func (c *Cache) ttlOrDefault(key string, ttl time.Duration) (time.Duration, error) {
	switch {
	case ttl == 0:
		return c.cfg.DefaultTTL, nil
	case ttl < time.Millisecond: // Redis keeps expiries in whole milliseconds (PX 0 is refused)
		return 0, fmt.Errorf("cachefx: %s: ttl %v below Redis's 1ms resolution", c.cfg.KeyAttribute.Quote(key), ttl)
	}
	return ttl, nil
}

// Set stores value under key for ttl (0: Config.DefaultTTL) and adds key to
// each tag's set, for InvalidateByTags. It returns nil once Redis holds the
// value and its tag sets hold the key, and, with the first layer on, the
// other processes have been told.
func (c *Cache) Set(ctx context.Context, key string, value []byte, ttl time.Duration, tags ...string) (err error) {
	ctx, span := c.obs.start(ctx, "cache.set", "SET", c.ns, key)
	defer func() {
		if err == nil {
			span.AddEvent("cache.stored")
		}
		span.Finish(err)
	}()
	if err = c.tooLarge(key, len(value)); err != nil {
		return err
	}
	if ttl, err = c.ttlOrDefault(key, ttl); err != nil {
		return err
	}
	full := c.valueKey(key)
	ctx, cancel := c.storeCtx(ctx)
	defer cancel()
	seen, sent := c.begin()
	var stored *redis.StatusCmd
	var pub *redis.IntCmd
	tagged := c.tagCalls(key, ttl, tags)
	// The key joins its tag sets only after the value is stored: the other
	// order could leave a live value in no tag set.
	tagAndTell := func(p redis.Pipeliner) error {
		queueAll(ctx, p, tagged)
		pub = c.bcast.publish(ctx, p, full)
		return nil
	}
	_, _ = c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		if stored = p.Set(ctx, full, value, ttl); c.inOrder {
			return tagAndTell(p)
		}
		return nil
	})
	defer c.wrote(full)
	if err = stored.Err(); err != nil {
		c.forget(ctx, full)
		return fmt.Errorf("cachefx: set %s: %w", c.cfg.KeyAttribute.Quote(key), err)
	}
	if !c.inOrder {
		_, _ = c.rdb.Pipelined(ctx, tagAndTell)
	}
	retryNoScript(ctx, c.rdb, tagged)
	if err = firstError(tagged); err != nil {
		c.dropUntagged(ctx, full)
		return fmt.Errorf("cachefx: set %s: adding it to its tag sets: %w (the value was deleted again)", c.cfg.KeyAttribute.Quote(key), err)
	}
	if c.local != nil { // a copy: the caller may reuse its buffer once Set returns
		c.local.fill(full, bytes.Clone(value), ttl, sent, seen, true)
	}
	if pub != nil && pub.Err() != nil {
		return fmt.Errorf("%w: set %s: %w", ErrNotPublished, c.cfg.KeyAttribute.Quote(key), pub.Err())
	}
	return nil
}

// begin is called before a Redis request whose outcome the first layer
// may keep: the epoch then, and the time the request leaves.
func (c *Cache) begin() (seen uint64, sent time.Time) {
	if c.local != nil {
		seen = c.local.currentEpoch()
	}
	return seen, time.Now()
}

// forget handles a write that failed: it may or may not have reached
// Redis, so this process drops its copies and, if Redis still answers,
// tells the others to drop theirs.
func (c *Cache) forget(ctx context.Context, keys ...string) {
	if c.local == nil {
		return
	}
	c.local.delete(keys...)
	ctx, cancel := c.storeCtx(context.WithoutCancel(ctx)) // the write's own has usually run out
	defer cancel()
	_ = c.bcast.publish(ctx, c.rdb, keys...).Err()
}

// dropUntagged deletes a value stored but missing from a tag set, where an
// invalidation would not find it.
func (c *Cache) dropUntagged(ctx context.Context, full string) {
	dctx, cancel := c.storeCtx(context.WithoutCancel(ctx)) // the write's own has usually run out
	_ = c.rdb.Del(dctx, full).Err()
	cancel()
	c.forget(ctx, full)
}

// Delete removes keys; it reports how many existed. It returns nil once
// Redis no longer holds them and, with the first layer on, the other
// processes have been told.
func (c *Cache) Delete(ctx context.Context, keys ...string) (n int64, err error) {
	if len(keys) == 0 {
		return 0, nil
	}
	ctx, span := c.obs.start(ctx, "cache.delete", "DEL", c.ns, keys...)
	defer func() { span.Finish(err) }()
	full := make([]string, len(keys))
	for i, k := range keys {
		full[i] = c.valueKey(k)
	}
	return c.deleteFull(ctx, full)
}

// deleteFull deletes with one DEL per key in one pipeline, so that keys of
// different Cluster slots may be mixed.
func (c *Cache) deleteFull(ctx context.Context, full []string) (n int64, err error) {
	sctx, cancel := c.storeCtx(ctx)
	defer cancel()
	dels := make([]*redis.IntCmd, len(full))
	var pub *redis.IntCmd
	_, _ = c.rdb.Pipelined(sctx, func(p redis.Pipeliner) error {
		for i, k := range full {
			dels[i] = p.Del(sctx, k)
		}
		if c.inOrder {
			pub = c.bcast.publish(sctx, p, full...)
		}
		return nil
	})
	defer c.wrote(full...)
	for _, d := range dels {
		n += d.Val()
		err = cmp.Or(err, d.Err())
	}
	if err != nil {
		c.forget(sctx, full...)
		return n, fmt.Errorf("cachefx: delete: %w", err)
	}
	if c.local != nil {
		c.local.delete(full...)
		if pub == nil {
			pub = c.bcast.publish(sctx, c.rdb, full...)
		}
		if pub.Err() != nil {
			return n, fmt.Errorf("%w: delete: %w", ErrNotPublished, pub.Err())
		}
	}
	return n, nil
}
