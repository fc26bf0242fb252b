// Package cachefx is a Redis cache as an Fx module: byte values with a TTL,
// namespaces, tags with invalidate-by-tags, GetOrLoad whose loader runs once
// per key even under a stampede across processes, JSON helpers, and an
// optional size- and age-bounded in-process first layer kept coherent
// across processes by invalidation messages. Operations are traced
// (cache.get, cache.set, cache.delete, cache.invalidate_by_tags) and
// measured (cache_hits_total{layer}, cache_misses_total,
// cache_stampede_prevented_total, cache_size{layer}).
package cachefx

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"golang.org/x/sync/singleflight"

	"github.com/redisfx/redisfx"
	"github.com/redisfx/redisfx/internal/scripts"
	"github.com/redisfx/redisfx/tracingfx"
)

// Cache reads and writes one namespace; Namespace gives views of others
// that share everything else (connection, first layer, metrics).
type Cache struct {
	*shared
	ns string
}

// shared is what every namespace view of one cache has in common.
type shared struct {
	cfg     Config
	rdb     redis.UniversalClient
	obs     *observer
	local   *localLayer // nil when off
	loads   singleflight.Group
	bcast   *broadcaster // nil when the first layer is off
	timeNow func() time.Time
}

// ValueTooLargeError refuses a value above Config.MaxValueBytes.
type ValueTooLargeError struct {
	redisfx.BaseError
	Key       string
	Size, Max int
}

// ErrInvalidNamespace: a namespace must be 1 to 64 of [A-Za-z0-9_.-].
var ErrInvalidNamespace = &redisfx.BaseError{Code: "cache_namespace_invalid", Message: "a cache namespace must be 1 to 64 characters of A-Z a-z 0-9 _ . -"}

// New builds a Cache without Fx. With the first layer on, call Start to
// receive other processes' invalidations, and Close at the end.
func New(rdb redis.UniversalClient, cfg Config, opts ...Option) (*Cache, error) {
	cfg, err := cfg.normalize()
	if err != nil {
		return nil, err
	}
	if !validNamespace(cfg.Namespace) {
		return nil, &ConfigError{"Namespace", ErrInvalidNamespace.Message}
	}
	var o options
	for _, f := range opts {
		f(&o)
	}
	s := &shared{cfg: cfg, rdb: rdb, timeNow: time.Now}
	if cfg.Local.MaxEntries > 0 {
		s.local = newLocalLayer(cfg.Local.MaxEntries, cfg.Local.TTL)
		s.bcast = newBroadcaster(rdb, cfg.KeyPrefix+"invalidate", s.local)
	}
	if s.obs, err = newObserver(o.registerer, o.tracer, s.local); err != nil {
		return nil, err
	}
	return &Cache{shared: s, ns: cfg.Namespace}, nil
}

// Start preloads the cache's script and, with the first layer on,
// subscribes to invalidations from other processes.
func (c *Cache) Start(ctx context.Context) error {
	_ = scripts.Preload(ctx, c.rdb, releaseGuardScript, takeTagScript) // not fatal: loads on first use
	if c.bcast == nil {
		return nil
	}
	return c.bcast.start(ctx)
}

// Close stops the invalidation subscription.
func (c *Cache) Close() error {
	if c.bcast == nil {
		return nil
	}
	return c.bcast.close()
}

// Namespace returns a view of the cache in namespace ns. It panics on an
// invalid name (a programming error: names are constants).
func (c *Cache) Namespace(ns string) *Cache {
	if !validNamespace(ns) {
		panic(fmt.Sprintf("cachefx: namespace %q: %s", ns, ErrInvalidNamespace.Message))
	}
	return &Cache{shared: c.shared, ns: ns}
}

// Name is the cache's namespace.
func (c *Cache) Name() string { return c.ns }

func validNamespace(ns string) bool {
	if ns == "" || len(ns) > 64 {
		return false
	}
	for _, r := range ns {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '.' || r == '-') {
			return false
		}
	}
	return true
}

// Keys in Redis. A namespace never contains ':' or '#', so a value key
// (<prefix><ns>:<key>) never meets a tag set or a load guard.
func (c *Cache) valueKey(key string) string { return c.cfg.KeyPrefix + c.ns + ":" + key }
func (c *Cache) tagKey(tag string) string   { return c.cfg.KeyPrefix + c.ns + "#tag:" + tag }
func (c *Cache) guardKey(key string) string { return c.cfg.KeyPrefix + c.ns + "#load:" + key }

func (c *Cache) storeCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.cfg.StoreTimeout)
}

// Get returns the value of key and whether it was found. A store failure is
// returned as an error (GetOrLoad, instead, falls back to its loader). The
// returned bytes may be shared with the first layer: do not modify them.
func (c *Cache) Get(ctx context.Context, key string) ([]byte, bool, error) {
	ctx, span := c.obs.start(ctx, "cache.get", "GET", attribute.String(AttrNamespace, c.ns), attribute.String(AttrKey, key))
	v, found, err := c.get(ctx, key, span)
	finish(span, err)
	return v, found, err
}

func (c *Cache) get(ctx context.Context, key string, span *tracingfx.PluginSpan) ([]byte, bool, error) {
	full := c.valueKey(key)
	if c.local != nil {
		if v, ok := c.local.get(full, c.timeNow()); ok {
			c.obs.hit(span, LayerLocal)
			return v, true, nil
		}
	}
	ctx, cancel := c.storeCtx(ctx)
	defer cancel()
	var (
		v     []byte
		ttl   time.Duration
		err   error
		epoch uint64
	)
	if c.local != nil {
		epoch = c.local.currentEpoch()
	}
	if c.local == nil {
		v, err = c.rdb.Get(ctx, full).Bytes()
	} else {
		// One round trip for the value and its remaining life, so the
		// first layer never keeps it longer than Redis does.
		var get *redis.StringCmd
		var pttl *redis.DurationCmd
		_, _ = c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			get, pttl = p.Get(ctx, full), p.PTTL(ctx, full)
			return nil
		})
		v, err = get.Bytes()
		if ttl = pttl.Val(); ttl == -1 { // no expiry: the layer's own TTL bounds it
			ttl = c.cfg.Local.TTL
		}
	}
	switch {
	case errors.Is(err, redis.Nil):
		c.obs.miss(span)
		return nil, false, nil
	case err != nil:
		return nil, false, fmt.Errorf("cachefx: get %q: %w", key, err)
	}
	c.obs.hit(span, LayerRedis)
	if c.local != nil {
		c.local.fill(full, v, ttl, c.timeNow(), epoch)
	}
	return v, true, nil
}

// Set stores value under key for ttl (0: Config.DefaultTTL) and adds key to
// each tag's set, for InvalidateByTags.
func (c *Cache) Set(ctx context.Context, key string, value []byte, ttl time.Duration, tags ...string) error {
	ctx, span := c.obs.start(ctx, "cache.set", "SET", attribute.String(AttrNamespace, c.ns), attribute.String(AttrKey, key))
	err := c.set(ctx, key, value, ttl, tags)
	if err == nil {
		event(span, "cache.stored")
	}
	finish(span, err)
	return err
}

func (c *Cache) set(ctx context.Context, key string, value []byte, ttl time.Duration, tags []string) error {
	if len(value) > c.cfg.MaxValueBytes {
		return &ValueTooLargeError{
			BaseError: redisfx.BaseError{Code: "cache_value_too_large", Message: fmt.Sprintf("cache value for %q is %d bytes, above MaxValueBytes %d", key, len(value), c.cfg.MaxValueBytes)},
			Key:       key, Size: len(value), Max: c.cfg.MaxValueBytes,
		}
	}
	if ttl < 0 {
		return fmt.Errorf("cachefx: set %q: negative ttl %v", key, ttl)
	}
	if ttl == 0 {
		ttl = c.cfg.DefaultTTL
	}
	full := c.valueKey(key)
	ctx, cancel := c.storeCtx(ctx)
	defer cancel()
	var err error
	if len(tags) == 0 {
		err = c.rdb.Set(ctx, full, value, ttl).Err()
	} else {
		// A tag set lives as long as its longest-lived member: NX gives a
		// new set its expiry, GT only ever lengthens it. Neither ever
		// leaves a set without one.
		_, err = c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.Set(ctx, full, value, ttl)
			for _, tag := range tags {
				tk := c.tagKey(tag)
				p.SAdd(ctx, tk, key)
				p.Do(ctx, "pexpire", tk, ttl.Milliseconds(), "nx")
				p.Do(ctx, "pexpire", tk, ttl.Milliseconds(), "gt")
			}
			return nil
		})
	}
	if err != nil {
		return fmt.Errorf("cachefx: set %q: %w", key, err)
	}
	if c.local != nil {
		// A copy: the caller may reuse its buffer once Set returns.
		c.local.set(full, bytes.Clone(value), ttl, c.timeNow())
		c.bcast.publish(ctx, full)
	}
	return nil
}

// Delete removes keys; it reports how many existed.
func (c *Cache) Delete(ctx context.Context, keys ...string) (int64, error) {
	if len(keys) == 0 {
		return 0, nil
	}
	ctx, span := c.obs.start(ctx, "cache.delete", "DEL", attribute.String(AttrNamespace, c.ns), attribute.String(AttrKey, strings.Join(keys, ",")))
	n, err := c.deleteFull(ctx, c.fullKeys(keys))
	finish(span, err)
	return n, err
}

func (c *Cache) fullKeys(keys []string) []string {
	full := make([]string, len(keys))
	for i, k := range keys {
		full[i] = c.valueKey(k)
	}
	return full
}

// deleteFull deletes with one DEL per key in one pipeline, so that keys of
// different Cluster slots may be mixed.
func (c *Cache) deleteFull(ctx context.Context, full []string) (int64, error) {
	if c.local != nil {
		c.local.delete(full...)
	}
	sctx, cancel := c.storeCtx(ctx)
	defer cancel()
	cmds := make([]*redis.IntCmd, len(full))
	_, err := c.rdb.Pipelined(sctx, func(p redis.Pipeliner) error {
		for i, k := range full {
			cmds[i] = p.Del(sctx, k)
		}
		return nil
	})
	var n int64
	for _, cmd := range cmds {
		n += cmd.Val()
	}
	if c.local != nil {
		c.bcast.publish(sctx, full...)
	}
	if err != nil {
		return n, fmt.Errorf("cachefx: delete: %w", err)
	}
	return n, nil
}
