package redistest

import (
	"context"
	"fmt"
	"net"
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

// NodeAt is the node listening at addr.
func (c *Cluster) NodeAt(addr string) *Server {
	c.t.Helper()
	for _, s := range c.Nodes {
		if s.Addr() == addr {
			return s
		}
	}
	c.t.Fatalf("redistest: no cluster node at %s", addr)
	return nil
}

// MasterOf is the node that is master of key's slot now.
func (c *Cluster) MasterOf(key string) *Server {
	c.t.Helper()
	m, err := c.Client().MasterForKey(context.Background(), key)
	if err != nil {
		c.t.Fatalf("redistest: master of %q: %v", key, err)
	}
	return c.NodeAt(m.Options().Addr)
}

// OtherMaster is a master other than not.
func (c *Cluster) OtherMaster(not *Server) *Server {
	c.t.Helper()
	for _, s := range c.Nodes {
		if s != not && strings.Contains(s.Client().Info(context.Background(), "replication").Val(), "role:master") {
			return s
		}
	}
	c.t.Fatal("redistest: no other master")
	return nil
}

// ClusterID is the node's id in its Cluster.
func (s *Server) ClusterID() string {
	id, err := s.Client().Do(context.Background(), "CLUSTER", "MYID").Text()
	if err != nil {
		panic(fmt.Sprintf("redistest: CLUSTER MYID of %s: %v", s.Addr(), err))
	}
	return id
}

// Migration moves one slot between masters step by step, as redis-cli
// --cluster reshard does, so that a test can act between the steps: while
// the slot migrates, a command whose keys have all left the source is
// redirected with ASK, one whose keys are split is refused with TRYAGAIN.
type Migration struct {
	c        *Cluster
	slot     int64
	from, to *Server
}

// BeginMigration marks slot as importing on to and migrating on from.
func (c *Cluster) BeginMigration(slot int64, from, to *Server) *Migration {
	c.t.Helper()
	ctx := context.Background()
	for _, step := range []struct {
		on   *Server
		args []any
	}{{to, []any{"CLUSTER", "SETSLOT", slot, "IMPORTING", from.ClusterID()}}, {from, []any{"CLUSTER", "SETSLOT", slot, "MIGRATING", to.ClusterID()}}} {
		if err := step.on.Client().Do(ctx, step.args...).Err(); err != nil {
			c.t.Fatalf("redistest: %v: %v", step.args, err)
		}
	}
	return &Migration{c: c, slot: slot, from: from, to: to}
}

// Move migrates keys (every key of the slot still on the source when none
// is given) to the importing master.
func (m *Migration) Move(keys ...string) {
	m.c.t.Helper()
	ctx := context.Background()
	if len(keys) == 0 {
		keys = m.from.Client().ClusterGetKeysInSlot(ctx, int(m.slot), 1000).Val()
	}
	host, port, _ := net.SplitHostPort(m.to.Addr())
	for _, k := range keys {
		if err := m.from.Client().Migrate(ctx, host, port, k, 0, 5*time.Second).Err(); err != nil {
			m.c.t.Fatalf("redistest: MIGRATE %s: %v", k, err)
		}
	}
}

// End moves the keys left and gives the slot to the importing master on
// every master (the replicas learn it from them; a client with the old
// slot map then meets MOVED).
func (m *Migration) End() {
	m.c.t.Helper()
	m.Move()
	ctx := context.Background()
	for _, s := range m.c.Nodes {
		sc := s.Client()
		if !strings.Contains(sc.Info(ctx, "replication").Val(), "role:master") {
			continue
		}
		if err := sc.Do(ctx, "CLUSTER", "SETSLOT", m.slot, "NODE", m.to.ClusterID()).Err(); err != nil {
			m.c.t.Fatalf("redistest: SETSLOT NODE on %s: %v", s.Addr(), err)
		}
	}
}

// TakeOver promotes a replica of master with CLUSTER FAILOVER TAKEOVER
// (which needs no agreement, so it completes right after the Cluster
// starts, where a plain CLUSTER FAILOVER may not) and returns it once it
// is master. master stays up, as a replica.
func (c *Cluster) TakeOver(master *Server) *Server {
	c.t.Helper()
	ctx := context.Background()
	_, port, _ := net.SplitHostPort(master.Addr())
	for _, s := range c.Nodes {
		sc := s.Client()
		info := sc.Info(ctx, "replication").Val()
		if !strings.Contains(info, "role:slave") || !strings.Contains(info, "master_port:"+port+"\r\n") {
			continue
		}
		if err := sc.Do(ctx, "CLUSTER", "FAILOVER", "TAKEOVER").Err(); err != nil {
			c.t.Fatalf("redistest: CLUSTER FAILOVER TAKEOVER on %s: %v", s.Addr(), err)
		}
		for deadline := time.Now().Add(10 * time.Second); !strings.Contains(sc.Info(ctx, "replication").Val(), "role:master"); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				c.t.Fatalf("redistest: %s did not take over from %s", s.Addr(), master.Addr())
			}
		}
		return s
	}
	c.t.Fatalf("redistest: %s has no replica", master.Addr())
	return nil
}
