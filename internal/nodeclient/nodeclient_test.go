package nodeclient_test

import (
	"context"
	"net"
	"testing"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/redisfx/redisfx/internal/nodeclient"
	"github.com/redisfx/redisfx/internal/redistest"
	"github.com/redisfx/redisfx/storefx"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A redirection may name a node by port alone (a Cluster node without an
// announced address): the node's own host is used.
func TestOneConn_AddressWithoutHostTakesTheNodesHost(t *testing.T) {
	srv := redistest.Start(t)
	host, port, _ := net.SplitHostPort(srv.Addr())
	node := redis.NewClient(&redis.Options{Addr: net.JoinHostPort(host, "1"), DisableIdentity: true})
	defer node.Close()
	c := nodeclient.OneConn(node, ":"+port)
	defer c.Close()
	if c.Options().Addr != srv.Addr() {
		t.Fatalf("address %q, want %q", c.Options().Addr, srv.Addr())
	}
	if err := c.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	if c.Options().PoolSize != 1 || c.Options().MaxRetries > 0 {
		t.Fatalf("pool %d, retries %d: want one connection, one try", c.Options().PoolSize, c.Options().MaxRetries)
	}
}

// Cluster finds the Cluster client under a storefx.Client (cachefx's
// sharded channel and idempotencyfx's slot reload depend on it) and
// nothing under a standalone one. No server is dialled: the clients are
// only built.
func TestCluster_UnwrapsAStorefxClient(t *testing.T) {
	cluster, err := storefx.New("c", storefx.Config{Cluster: true, Addrs: []string{"127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	single, err := storefx.New("s", storefx.Config{URL: "redis://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	defer single.Close()
	if nodeclient.Cluster(cluster) == nil || nodeclient.Cluster(cluster.UniversalClient) == nil {
		t.Fatal("no Cluster client found under a Cluster storefx.Client")
	}
	if nodeclient.Cluster(single) != nil || nodeclient.Cluster(single.UniversalClient) != nil {
		t.Fatal("a Cluster client found under a standalone one")
	}
}
