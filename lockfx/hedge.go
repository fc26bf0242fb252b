package lockfx

import (
	"context"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// hedgeClient is a client of one fresh connection to the Redis node that
// holds key, for a renewal hedge (see renew): go-redis hands a command an
// idle pooled connection first, so when the pooled connections stall
// (frozen by a middlebox, say) every renewal, hedges included, would wait
// on one of them while new connections work. It has the node's options
// (address, credentials, TLS, timeouts), but none of the client's hooks
// (so its command is in no metric) nor its Limiter, and it makes one try.
// Close it after the call. nil when the client is not a go-redis Client or
// ClusterClient (a Ring, a mock): the hedge then goes through the pool.
func hedgeClient(ctx context.Context, rdb redis.UniversalClient, key string) *redis.Client {
	if w, ok := rdb.(interface{ Unwrap() redis.UniversalClient }); ok { // a storefx.Client
		rdb = w.Unwrap()
	}
	var node *redis.Client
	switch c := rdb.(type) {
	case *redis.Client:
		node = c
	case *redis.ClusterClient:
		n, err := c.MasterForKey(ctx, key)
		if err != nil {
			return nil
		}
		node = n
	default:
		return nil
	}
	o := *node.Options()
	o.PoolSize, o.MinIdleConns, o.MaxIdleConns, o.MaxActiveConns = 1, 0, 1, 1
	o.PipelinePoolSize = -1
	o.MaxRetries = -1 // a stuck hedge ends with its context; the next one dials anew
	o.Limiter = nil
	o.AutoPipelineOptions = nil
	o.ClientSideCache, o.ClientSideCacheConfig = nil, nil
	o.PushNotificationProcessor = nil // its own, not the node's
	o.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	return redis.NewClient(&o)
}
