package nodeclient_test

import (
	"context"
	"net"
	"testing"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/redisfx/redisfx/internal/nodeclient"
	"github.com/redisfx/redisfx/internal/redistest"
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
