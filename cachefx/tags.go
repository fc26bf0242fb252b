package cachefx

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"

	"github.com/redisfx/redisfx/tracingfx"
)

// takeTagScript reads and deletes one tag set atomically. One script per
// tag, pipelined: each touches one key, so on a Cluster the pipeline is
// split by node and no command crosses slots.
var takeTagScript = redis.NewScript(`
local m = redis.call('SMEMBERS', KEYS[1])
redis.call('DEL', KEYS[1])
return m
`)

// InvalidateByTags deletes every value stored with any of tags (in this
// namespace) and the tag sets themselves; it reports how many values
// existed. Each tag set is read and deleted atomically, so a value tagged
// while the invalidation runs is either deleted or still in its set.
func (c *Cache) InvalidateByTags(ctx context.Context, tags ...string) (int64, error) {
	ctx, span := c.obs.start(ctx, "cache.invalidate_by_tags", "", attribute.String(AttrNamespace, c.ns), attribute.StringSlice(AttrTags, tags))
	n, err := c.invalidateByTags(ctx, tags, span)
	finish(span, err)
	return n, err
}

func (c *Cache) invalidateByTags(ctx context.Context, tags []string, span *tracingfx.PluginSpan) (int64, error) {
	if len(tags) == 0 {
		return 0, nil
	}
	members := make([]*redis.Cmd, len(tags))
	sctx, cancel := c.storeCtx(ctx)
	err := func() error {
		defer cancel()
		run := func() error {
			_, err := c.rdb.Pipelined(sctx, func(p redis.Pipeliner) error {
				for i, tag := range tags {
					members[i] = takeTagScript.EvalSha(sctx, p, []string{c.tagKey(tag)})
				}
				return nil
			})
			return err
		}
		err := run()
		if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") { // Redis lost its script cache (restart)
			if err = takeTagScript.Load(sctx, c.rdb).Err(); err == nil {
				err = run()
			}
		}
		return err
	}()
	event(span, "tag.lookup", attribute.Int("count", len(tags)))
	if err != nil {
		return 0, fmt.Errorf("cachefx: invalidate tags %q: %w", tags, err)
	}
	seen := map[string]bool{}
	var keys []string
	for _, m := range members {
		members, _ := m.StringSlice()
		for _, k := range members {
			if !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
	}
	event(span, "keys.found", attribute.Int("count", len(keys)))
	if len(keys) == 0 {
		event(span, "keys.deleted", attribute.Int("count", 0))
		return 0, nil
	}
	n, err := c.deleteFull(ctx, c.fullKeys(keys))
	event(span, "keys.deleted", attribute.Int64("count", n))
	return n, err
}
