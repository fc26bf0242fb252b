// Package nodeclient makes go-redis clients of one fresh connection to one
// Redis node, for the few calls that must not go through a client's pool
// or its Cluster routing (a lock renewal hedge, a claim's WAIT).
package nodeclient

import (
	"context"
	"net"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// unwrap is the go-redis client under a storefx.Client (rdb otherwise).
func unwrap(rdb redis.UniversalClient) redis.UniversalClient {
	if w, ok := rdb.(interface{ Unwrap() redis.UniversalClient }); ok {
		return w.Unwrap()
	}
	return rdb
}

// Cluster is rdb's *redis.ClusterClient (a storefx.Client is unwrapped),
// nil when rdb is not a Cluster client.
func Cluster(rdb redis.UniversalClient) *redis.ClusterClient {
	cc, _ := unwrap(rdb).(*redis.ClusterClient)
	return cc
}

// ForKey is the client of the node that serves key: rdb itself for a
// standalone (or Sentinel) client, the key's master for a Cluster client;
// nil when rdb is neither (a Ring, a mock).
func ForKey(ctx context.Context, rdb redis.UniversalClient, key string) (*redis.Client, error) {
	switch c := unwrap(rdb).(type) {
	case *redis.Client:
		return c, nil
	case *redis.ClusterClient:
		return c.MasterForKey(ctx, key)
	}
	return nil, nil //nolint:nilnil // no node client is no error: the caller decides (lockfx's hedge uses the pool, ReplicaAcks refuses)
}

// OneConn is a client of one fresh connection with node's options at addr
// (node's own address when addr is ""; a redirection's address without a
// host takes node's host). It has none of node's hooks (its commands are in
// no metric or span) and makes one try. Close it after use.
func OneConn(node *redis.Client, addr string) *redis.Client {
	o := *node.Options()
	if addr != "" {
		if host, port, err := net.SplitHostPort(addr); err == nil && host == "" {
			if nodeHost, _, err := net.SplitHostPort(o.Addr); err == nil {
				addr = net.JoinHostPort(nodeHost, port)
			}
		}
		o.Addr = addr
	}
	o.PoolSize, o.MinIdleConns, o.MaxIdleConns, o.MaxActiveConns = 1, 0, 1, 1
	o.PipelinePoolSize = -1
	o.MaxRetries = -1 // one try: the caller decides what a failure means
	o.Limiter = nil
	o.AutoPipelineOptions = nil
	o.ClientSideCache, o.ClientSideCacheConfig = nil, nil
	o.PushNotificationProcessor = nil // its own, not the node's
	o.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	return redis.NewClient(&o)
}
