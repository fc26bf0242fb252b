package redistest

import (
	"context"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// Cluster is a local Redis Cluster of private servers.
type Cluster struct {
	t     testing.TB
	Nodes []*Server
}

// StartCluster starts masters*(1+replicas) private servers in cluster mode
// and joins them with redis-cli --cluster create. It waits until the
// cluster reports state ok.
func StartCluster(t testing.TB, masters, replicas int) *Cluster {
	t.Helper()
	if _, err := exec.LookPath("redis-cli"); err != nil {
		t.Fatalf("redistest: redis-cli is not on PATH (install redis-tools): %v", err)
	}
	c := &Cluster{t: t}
	n := masters * (1 + replicas)
	addrs := make([]string, 0, n)
	for i := 0; i < n; i++ {
		s := StartPrivate(t, WithArgs("--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000",
			// Replicas always stand in for a dead master, whatever their data age
			// (tests kill masters on purpose).
			"--cluster-replica-validity-factor", "0"))
		c.Nodes = append(c.Nodes, s)
		addrs = append(addrs, s.Addr())
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	out, err := exec.Command("redis-cli", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("redistest: redis-cli --cluster create: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, s := range c.Nodes {
		cl := s.Client()
		for {
			info, err := cl.ClusterInfo(ctx).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("redistest: cluster did not become ok: %v %s", err, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return c
}

// Addrs lists every node's address (the seed list of a cluster client).
func (c *Cluster) Addrs() []string {
	a := make([]string, len(c.Nodes))
	for i, s := range c.Nodes {
		a[i] = s.Addr()
	}
	return a
}

// Client returns a cluster client, closed when the test ends.
func (c *Cluster) Client() *redis.ClusterClient {
	cl := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: c.Addrs(), DisableIdentity: true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
	c.t.Cleanup(func() { _ = cl.Close() })
	return cl
}
