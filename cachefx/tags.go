package cachefx

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// A tag set is a sorted set of keys scored by when each key's value
// expires (Redis time, in ms), pruned at each addition. Each script
// touches one key, so on a Cluster it stays in one slot.

// tagScript adds ARGV[1] (a key) to the tag set KEYS[1] for a value that
// lives ARGV[2] milliseconds. The score always rises, even for the same
// expiry, so an invalidation can tell that a key was tagged again after
// it read the set. The set lives as long as its longest-lived member (NX
// gives a new set its expiry, GT only ever lengthens it). Scores are
// formatted with 17 digits: Lua's default would round them to 0.1 ms.
var tagScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local score = now + tonumber(ARGV[2])
local old = redis.call('ZSCORE', KEYS[1], ARGV[1])
if old and tonumber(old) >= score then score = tonumber(old) + 0.001 end
redis.call('ZADD', KEYS[1], string.format('%.17g', score), ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', string.format('%.17g', now - 1))
local at = string.format('%.0f', math.ceil(score))
redis.call('PEXPIREAT', KEYS[1], at, 'NX')
redis.call('PEXPIREAT', KEYS[1], at, 'GT')
return 1
`)

// readTagScript returns the live members of the tag set KEYS[1] with their
// scores (member, score, …): those scored ahead of Redis's clock less 1 ms
// (Redis expires a key only once its millisecond clock is past the
// expiry). A member below that is gone in intent: its value expired, or it
// was retired more than the grace ago. It writes nothing.
var readTagScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
return redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. string.format('%.17g', now - 1), '+inf', 'WITHSCORES')
`)

// retireScript retires from the tag set KEYS[1] the members an
// invalidation read and deleted (ARGV[1]: the grace in ms; then member,
// score, …), except those tagged again since (their score moved). A
// retired member's score becomes now + grace, so that another process's
// invalidation of the same tag meanwhile still finds the key and drops its
// first-layer copy; the next addition or retirement removes it.
var retireScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', string.format('%.17g', now - 1))
local retired = now + tonumber(ARGV[1])
local n = 0
for i = 2, #ARGV, 2 do
  local s = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if s and tonumber(s) == tonumber(ARGV[i + 1]) and tonumber(s) > retired then
    redis.call('ZADD', KEYS[1], string.format('%.17g', retired), ARGV[i])
    n = n + 1
  end
end
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
if last[2] then redis.call('PEXPIREAT', KEYS[1], string.format('%.0f', math.ceil(tonumber(last[2])))) end
return n
`)

// retiredGrace is how long a retired member stays in its tag set: longer
// than any first layer's trust window (at most 2 s).
const retiredGrace = 3 * time.Second

// retireBatch bounds the members of one retireScript call.
const retireBatch = 500

// tagCalls are the tagScript runs that add key to each tag's set.
func (c *Cache) tagCalls(key string, ttl time.Duration, tags []string) []*scriptCall {
	calls := make([]*scriptCall, len(tags))
	for i, tag := range tags {
		calls[i] = &scriptCall{script: tagScript, keys: []string{c.tagKey(tag)}, args: []any{key, ttl.Milliseconds()}}
	}
	return calls
}

// InvalidateByTags deletes every value stored with any of tags (in this
// namespace); it reports how many values existed. It returns nil only if
// every value tagged before it began is gone; after an error some may
// remain, and calling it again deletes them (the tag sets are emptied
// only after their values are deleted).
func (c *Cache) InvalidateByTags(ctx context.Context, tags ...string) (n int64, err error) {
	ctx, span := c.obs.start(ctx, "cache.invalidate_by_tags", "", c.ns)
	c.obs.tags(span, tags)
	defer func() { span.Finish(err) }()
	if len(tags) == 0 {
		return 0, nil
	}
	tagKeys, reads := make([]string, len(tags)), make([]*scriptCall, len(tags))
	for i, tag := range tags {
		tagKeys[i] = c.tagKey(tag)
		reads[i] = &scriptCall{script: readTagScript, keys: tagKeys[i : i+1]}
	}
	defer c.wrote(tagKeys...)
	sctx, cancel := c.storeCtx(ctx)
	// 1. Each set's live members, left in place (a set not read stays
	// whole: a retry finds its keys).
	readErr := runCalls(sctx, c.rdb, reads...)
	cancel()
	span.AddEvent("tag.lookup", trace.WithAttributes(attribute.Int("count", len(tags))))
	seen := map[string]bool{}
	var keys []string
	for _, r := range reads {
		members, _ := r.cmd.StringSlice() // member, score, …
		for i := 0; i+1 < len(members); i += 2 {
			if k := members[i]; !seen[k] {
				seen[k] = true
				keys = append(keys, c.valueKey(k))
			}
		}
	}
	span.AddEvent("keys.found", trace.WithAttributes(attribute.Int("count", len(keys))))
	// 2. Delete the values (and tell the other processes).
	if len(keys) > 0 {
		n, err = c.deleteFull(ctx, keys)
	}
	span.AddEvent("keys.deleted", trace.WithAttributes(attribute.Int64("count", n)))
	if err != nil {
		return n, fmt.Errorf("cachefx: invalidate tags %q: %w", c.cfg.KeyAttribute.Values(tags), err)
	}
	// 3. Retire what was read and deleted (a failure costs only room).
	c.retire(ctx, reads)
	if readErr != nil {
		return n, fmt.Errorf("cachefx: invalidate tags %q: %w", c.cfg.KeyAttribute.Values(tags), readErr)
	}
	return n, nil
}

func (c *Cache) retire(ctx context.Context, reads []*scriptCall) {
	var calls []*scriptCall
	for _, r := range reads {
		members, _ := r.cmd.StringSlice()
		for len(members) > 0 {
			batch := members[:min(len(members), 2*retireBatch)]
			members = members[len(batch):]
			args := append(make([]any, 0, 1+len(batch)), retiredGrace.Milliseconds())
			for _, m := range batch {
				args = append(args, m)
			}
			calls = append(calls, &scriptCall{script: retireScript, keys: r.keys, args: args})
		}
	}
	sctx, cancel := c.storeCtx(ctx)
	defer cancel()
	_ = runCalls(sctx, c.rdb, calls...)
}

// scriptCall is one run of a script inside a pipeline.
type scriptCall struct {
	script *redis.Script
	keys   []string
	args   []any
	cmd    *redis.Cmd
}

func queueAll(ctx context.Context, p redis.Pipeliner, calls []*scriptCall) {
	for _, sc := range calls {
		sc.cmd = sc.script.EvalSha(ctx, p, sc.keys, sc.args...)
	}
}

// runCalls runs calls in one pipeline, then retryNoScript; it returns the
// first failure.
func runCalls(ctx context.Context, rdb redis.Cmdable, calls ...*scriptCall) error {
	_, _ = rdb.Pipelined(ctx, func(p redis.Pipeliner) error { queueAll(ctx, p, calls); return nil })
	retryNoScript(ctx, rdb, calls)
	return firstError(calls)
}

func firstError(calls []*scriptCall) error {
	for _, sc := range calls {
		if err := sc.cmd.Err(); err != nil {
			return err
		}
	}
	return nil
}

// retryNoScript runs again, with the script's body, the calls that a
// server answered NOSCRIPT (it lost its script cache: a restart, a
// failover, SCRIPT FLUSH). Only those: on a Cluster the other masters have
// already run theirs, and running a call twice is not always harmless.
func retryNoScript(ctx context.Context, rdb redis.Cmdable, calls []*scriptCall) {
	var again []*scriptCall
	for _, sc := range calls {
		if redis.HasErrorPrefix(sc.cmd.Err(), "NOSCRIPT") {
			again = append(again, sc)
		}
	}
	if len(again) == 0 {
		return
	}
	_, _ = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, sc := range again {
			sc.cmd = sc.script.Eval(ctx, p, sc.keys, sc.args...)
		}
		return nil
	})
}
