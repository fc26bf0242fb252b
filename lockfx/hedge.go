package lockfx

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/redisfx/redisfx/internal/nodeclient"
)

// hedgeClient is a client of one fresh connection to the Redis node that
// holds key, for a renewal hedge (see renew): go-redis hands a command an
// idle pooled connection first, so when the pooled connections stall
// (frozen by a middlebox, say) every renewal, hedges included, would wait
// on one of them while new connections work. It has the node's options
// but none of the client's hooks (see nodeclient.OneConn), and it makes
// one try. Close it after the call. nil when the client is not a go-redis
// Client or ClusterClient (a Ring, a mock): the hedge then goes through
// the pool.
func hedgeClient(ctx context.Context, rdb redis.UniversalClient, key string) *redis.Client {
	node, err := nodeclient.ForKey(ctx, rdb, key)
	if err != nil || node == nil {
		return nil
	}
	return nodeclient.OneConn(node, "")
}
