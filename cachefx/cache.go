package cachefx

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/maphash"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/singleflight"

	"github.com/redisfx/redisfx"
	"github.com/redisfx/redisfx/internal/clientcheck"
	"github.com/redisfx/redisfx/internal/plugin"
	"github.com/redisfx/redisfx/internal/scripts"
	"github.com/redisfx/redisfx/plugintrace"
	"github.com/redisfx/redisfx/storefx"
)

// Cache reads and writes one namespace; Namespace gives views of others
// that share everything else (connection, first layer, metrics).
type Cache struct {
	*shared
	ns string
}

// shared is what every namespace view of one cache has in common.
type shared struct {
	cfg   Config
	rdb   redis.UniversalClient
	obs   *observer
	local *localLayer // nil when off
	loads singleflight.Group
	bcast *broadcaster // nil when the first layer is off
	// written counts finished writes (here or announced) per stripe of
	// Redis keys: a GetOrLoad never joins a load older than a write.
	written [64]atomic.Uint64
	// inOrder: a pipeline runs in order (one server; not a Cluster).
	inOrder bool
}

// wrote records that writes of the Redis keys have finished (or failed).
func (s *shared) wrote(full ...string) {
	for _, k := range full {
		s.writeCount(k).Add(1)
	}
}

func (s *shared) writeCount(full string) *atomic.Uint64 {
	return &s.written[maphash.String(writeSeed, full)%uint64(len(s.written))]
}

var writeSeed = maphash.MakeSeed()

// singleNode reports whether rdb talks to one server (a plain or
// Sentinel-managed client) rather than a Cluster or a Ring.
func singleNode(rdb redis.UniversalClient) bool {
	if c, ok := rdb.(*storefx.Client); ok {
		rdb = c.UniversalClient
	}
	_, ok := rdb.(*redis.Client)
	return ok
}

// ValueTooLargeError refuses a value above Config.MaxValueBytes.
type ValueTooLargeError struct {
	redisfx.BaseError
	Key       string
	Size, Max int
}

const namespaceRule = "a cache namespace must be 1 to 64 characters of A-Z a-z 0-9 _ . -"

// New builds a Cache without Fx. With the first layer on, call Start to
// receive other processes' invalidations, and Close at the end.
func New(rdb redis.UniversalClient, cfg Config, opts ...Option) (*Cache, error) {
	cfg, err := cfg.normalize()
	if err != nil {
		return nil, err
	}
	if !validNamespace(cfg.Namespace) {
		return nil, configError("Namespace", namespaceRule)
	}
	if err := clientcheck.HonoursDeadlines("cachefx", "Config.StoreTimeout", rdb); err != nil {
		return nil, err
	}
	o := plugin.Apply("cache", plugin.Options{}, opts...)
	s := &shared{cfg: cfg, rdb: rdb, inOrder: singleNode(rdb)}
	if cfg.Local.MaxEntries > 0 {
		s.local = newLocalLayer(cfg.Local.MaxEntries, cfg.Local.TTL)
		s.bcast = newBroadcaster(rdb, cfg.KeyPrefix+"invalidate", s.local, cfg.Local.TTL, s.wrote)
	}
	if s.obs, err = newObserver(o.Registerer, o.Tracer, cfg.KeyAttribute, s.local); err != nil {
		return nil, err
	}
	return &Cache{shared: s, ns: cfg.Namespace}, nil
}

// Start preloads the cache's scripts and, with the first layer on,
// subscribes to invalidations from other processes. Until it has, the
// first layer answers nothing.
func (c *Cache) Start(ctx context.Context) error {
	_ = scripts.Preload(plugintrace.WithoutCommandSpans(ctx), c.rdb, tagScript, readTagScript, retireScript, leaseScript, leasedScript) // not fatal: loads on first use
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
		panic(fmt.Sprintf("cachefx: namespace %q: %s", ns, namespaceRule))
	}
	return &Cache{shared: c.shared, ns: ns}
}

// Name is the cache's namespace.
func (c *Cache) Name() string { return c.ns }

func validNamespace(ns string) bool {
	return len(ns) >= 1 && len(ns) <= 64 && strings.Trim(ns, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-") == ""
}

// Keys in Redis. A namespace never contains ':' or '#', so a value key
// (<prefix><ns>:<key>) never meets a tag set.
func (c *Cache) valueKey(key string) string { return c.cfg.KeyPrefix + c.ns + ":" + key }
func (c *Cache) tagKey(tag string) string   { return c.cfg.KeyPrefix + c.ns + "#tagset:" + tag }

func (c *Cache) storeCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.cfg.StoreTimeout)
}

// Get returns the value of key and whether it was found. A store failure is
// returned as an error (GetOrLoad, instead, falls back to its loader). The
// returned bytes may be shared with the first layer: do not modify them.
func (c *Cache) Get(ctx context.Context, key string) (v []byte, found bool, err error) {
	ctx, span := c.obs.start(ctx, "cache.get", "GET", c.ns, key)
	defer func() { span.Finish(err) }()
	full := c.valueKey(key)
	if c.local != nil && c.bcast.trusted() {
		if v, ok := c.local.get(full, time.Now()); ok {
			c.obs.hit(span, LayerLocal)
			return v, true, nil
		}
	}
	sctx, cancel := c.storeCtx(ctx)
	defer cancel()
	seen, sent := c.begin()
	var pttl time.Duration
	v, pttl, found, err = c.read(sctx, full)
	switch {
	case err != nil:
		return nil, false, fmt.Errorf("cachefx: get %s: %w", c.cfg.KeyAttribute.Quote(key), err)
	case !found:
		c.obs.miss(span)
		return nil, false, nil
	}
	c.obs.hit(span, LayerRedis)
	if c.local != nil {
		c.local.fill(full, v, pttl, sent, seen, false)
	}
	return v, true, nil
}

// read returns the value under full and, with the first layer on, its
// remaining life in the same round trip (0 when unknown: not kept). MGET:
// a leased key (a hash) reads as nil, where GET fails with WRONGTYPE.
func (c *Cache) read(ctx context.Context, full string) ([]byte, time.Duration, bool, error) {
	var vals *redis.SliceCmd
	var pttl *redis.Cmd
	if c.local == nil {
		vals = c.rdb.MGet(ctx, full)
	} else {
		_, _ = c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			vals, pttl = p.MGet(ctx, full), p.Do(ctx, "pttl", full)
			return nil
		})
	}
	if err := vals.Err(); err != nil {
		return nil, 0, false, err
	}
	s, found := vals.Val()[0].(string)
	if !found {
		return nil, 0, false, nil
	}
	var ttl time.Duration
	if pttl != nil {
		ms, _ := pttl.Int64() // 0 on an error: not kept
		ttl = c.lifeLeft(ms)
	}
	return []byte(s), ttl, true, nil
}

// GetJSON reads key and decodes its JSON value into a T.
func GetJSON[T any](ctx context.Context, c *Cache, key string) (value T, found bool, err error) {
	b, found, err := c.Get(ctx, key)
	if err != nil || !found {
		return value, found, err
	}
	err = json.Unmarshal(b, &value)
	return value, err == nil, err
}

// SetJSON stores value encoded as JSON (see Cache.Set).
func SetJSON[T any](ctx context.Context, c *Cache, key string, value T, ttl time.Duration, tags ...string) error {
	b, err := json.Marshal(value)
	if err != nil {
		return err
	}
	return c.Set(ctx, key, b, ttl, tags...)
}

// GetOrLoadJSON is Cache.GetOrLoad for a typed value stored as JSON.
func GetOrLoadJSON[T any](ctx context.Context, c *Cache, key string, ttl time.Duration, load func(context.Context) (T, error), tags ...string) (T, error) {
	var value T
	b, err := c.GetOrLoad(ctx, key, ttl, func(ctx context.Context) ([]byte, error) {
		v, err := load(ctx)
		if err != nil {
			return nil, err
		}
		return json.Marshal(v)
	}, tags...)
	if err != nil && b == nil {
		return value, err
	}
	if uerr := json.Unmarshal(b, &value); uerr != nil {
		return value, uerr
	}
	return value, err
}
