package lockfx

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/redisfx/redisfx/internal/nodeclient"
)

// hedgeClient is a one-try client of a new connection to the node that
// holds key (see nodeclient.OneConn), for a renewal hedge: go-redis hands
// out idle pooled connections first, which may all be stalled. nil when
// rdb is not a go-redis Client or ClusterClient. Close it after the call.
func hedgeClient(ctx context.Context, rdb redis.UniversalClient, key string) *redis.Client {
	node, err := nodeclient.ForKey(ctx, rdb, key)
	if err != nil || node == nil {
		return nil
	}
	return nodeclient.OneConn(node, "")
}
