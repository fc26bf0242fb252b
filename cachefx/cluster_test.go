package cachefx

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/redisfx/redisfx/internal/faultproxy"
	"github.com/redisfx/redisfx/internal/redistest"
	"github.com/redisfx/redisfx/storefx"
)

// On a Redis Cluster values and tag sets spread over all masters: a tagged
// write pipelines across slots, InvalidateByTags runs one MULTI per slot,
// and GetOrLoad's guard still lets one loader run.
func TestCluster_TagsAndGetOrLoadAcrossMasters(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-master cluster")
	}
	t.Parallel()
	cl := redistest.StartCluster(t, 3, 0)
	client, err := storefx.New("default", storefx.Config{Addrs: cl.Addrs()})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	c := newCache(t, client, Config{Local: LocalConfig{MaxEntries: 100}})
	ctx := context.Background()
	for i := range 30 {
		if err := c.Set(ctx, fmt.Sprint("item-", i), []byte("v"), time.Minute, fmt.Sprint("group-", i%3), "all"); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := c.InvalidateByTags(ctx, "group-0", "group-1"); err != nil || n != 20 {
		t.Fatalf("invalidate two groups = %d %v, want 20", n, err)
	}
	if n, err := c.InvalidateByTags(ctx, "all"); err != nil || n != 10 {
		t.Fatalf("invalidate the rest = %d %v, want 10", n, err)
	}
	var loads atomic.Int64
	done := make(chan struct{})
	for range 20 {
		go func() {
			defer func() { done <- struct{}{} }()
			_, _ = c.GetOrLoad(ctx, "report", time.Minute, func(context.Context) ([]byte, error) {
				loads.Add(1)
				time.Sleep(50 * time.Millisecond)
				return []byte("r"), nil
			})
		}()
	}
	for range 20 {
		<-done
	}
	if loads.Load() != 1 {
		t.Fatalf("loader ran %d times on a cluster", loads.Load())
	}
}

// One master lost its script cache (SCRIPT FLUSH; a restart or failover
// does the same): InvalidateByTags ran the whole pipeline of read-and-delete
// scripts again after NOSCRIPT, the other masters' sets were already empty,
// and it returned 5, nil with 7 of 12 tagged values alive. Every tagged
// value must go, or an error must say so.
func TestCluster_InvalidateByTagsAfterOneMasterLostItsScripts(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-master cluster")
	}
	t.Parallel()
	cl := redistest.StartCluster(t, 3, 0)
	client, err := storefx.New("default", storefx.Config{Addrs: cl.Addrs()})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	c := newCache(t, client, Config{})
	ctx := context.Background()
	tags := make([]string, 12)
	for i := range tags {
		tags[i] = fmt.Sprint("tag-", i)
		if err := c.Set(ctx, fmt.Sprint("item-", i), []byte("v"), time.Hour, tags[i]); err != nil {
			t.Fatal(err)
		}
	}
	// Flush the master of the first tag set: it holds some of the sets,
	// not all (checked).
	cc := cl.Client()
	victim, err := cc.MasterForKey(ctx, c.tagKey(tags[0]))
	if err != nil {
		t.Fatal(err)
	}
	onVictim := 0
	for _, tag := range tags {
		if m, _ := cc.MasterForKey(ctx, c.tagKey(tag)); m.Options().Addr == victim.Options().Addr {
			onVictim++
		}
	}
	if onVictim == len(tags) {
		t.Fatal("every tag set on one master: the test needs them spread")
	}
	if err := victim.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	n, err := c.InvalidateByTags(ctx, tags...)
	alive := 0
	for i := range tags {
		if cc.Exists(ctx, c.valueKey(fmt.Sprint("item-", i))).Val() == 1 {
			alive++
		}
	}
	if err == nil && (n != 12 || alive != 0) {
		t.Fatalf("InvalidateByTags = %d, nil with %d of 12 tagged values alive", n, alive)
	}
	if err != nil {
		t.Fatalf("InvalidateByTags = %d, %v (%d alive): a lost script cache is not a failure", n, err, alive)
	}
}

// On a Cluster a Set's pipeline is split by master and the parts run
// independently: the key could join its tag set while its value was still
// on its way to another master. An invalidation in between emptied the set
// and deleted the old value; then the new value landed, live and in no
// tag set, and no later invalidation found it. Now the value is stored
// first and the key joins its tag sets after.
func TestCluster_ValueNeverLiveOutsideItsTagSets(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-master cluster")
	}
	t.Parallel()
	cl := redistest.StartCluster(t, 3, 0)
	g := newGate(false, commandIs("set", "v2"))
	hooked := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), DisableIdentity: true, ContextTimeoutEnabled: true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
		NewClient: func(opt *redis.Options) *redis.Client {
			node := redis.NewClient(opt)
			node.AddHook(g) // on each master's client: holds one master's part of a pipeline
			return node
		}})
	defer hooked.Close()
	prefix := redistest.Prefix(t)
	writer := newCache(t, &storefx.Client{UniversalClient: hooked}, Config{KeyPrefix: prefix})
	plain, err := storefx.New("default", storefx.Config{Addrs: cl.Addrs()})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	invalidator := newCache(t, plain, Config{KeyPrefix: prefix})
	ctx := context.Background()
	// A tag whose set lives on another master than the value.
	cc := cl.Client()
	valueNode, _ := cc.MasterForKey(ctx, writer.valueKey("k"))
	tag := ""
	for i := 0; tag == ""; i++ {
		if n, _ := cc.MasterForKey(ctx, writer.tagKey(fmt.Sprint("t", i))); n.Options().Addr != valueNode.Options().Addr {
			tag = fmt.Sprint("t", i)
		}
	}
	if err := writer.Set(ctx, "k", []byte("v1"), time.Hour, tag); err != nil {
		t.Fatal(err)
	}
	g.armed.Store(true)
	done := make(chan error, 1)
	go func() { done <- writer.Set(ctx, "k", []byte("v2"), time.Hour, tag) }()
	<-g.reached // v2 is held on its way to the value's master
	if _, err := invalidator.InvalidateByTags(ctx, tag); err != nil {
		t.Fatal(err)
	}
	close(g.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// The Set has returned: an invalidation that starts now must delete v2.
	if _, err := invalidator.InvalidateByTags(ctx, tag); err != nil {
		t.Fatal(err)
	}
	if v, err := cc.Get(ctx, writer.valueKey("k")).Result(); err == nil {
		t.Fatalf("%q survived an invalidation of its tag that began after its Set returned", v)
	}
}

// Found by the checker (a CLIENT PAUSE of one master): on a Cluster a
// Delete's message goes out after its DEL. A DEL that timed out had
// reached Redis, but the message was sent with the Delete's own context,
// which had run out with the DEL: it never left, though the channel's
// master answered, and another process went on serving the deleted value
// from its first layer for up to Local.TTL. A failed write now tells the
// others with a StoreTimeout of its own (docs/cache.md: "the other
// processes are told if Redis still answers").
func TestCluster_FailedDeleteTellsTheOthersWhileTheChannelsMasterAnswers(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-master cluster")
	}
	t.Parallel()
	cl := redistest.StartCluster(t, 3, 0)
	proxies := map[string]*faultproxy.Proxy{} // node address -> the writer's proxy to it
	for _, n := range cl.Nodes {
		proxies[n.Addr()] = faultproxy.Start(t, n.Addr())
	}
	viaProxies := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), DisableIdentity: true, ContextTimeoutEnabled: true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if p, ok := proxies[addr]; ok {
				addr = p.Addr()
			}
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}})
	defer viaProxies.Close()
	prefix := redistest.Prefix(t)
	local := LocalConfig{MaxEntries: 100, TTL: time.Minute} // interval 1 s
	writer := newCache(t, &storefx.Client{UniversalClient: viaProxies}, Config{KeyPrefix: prefix, Local: local, StoreTimeout: 100 * time.Millisecond})
	plain, err := storefx.New("default", storefx.Config{Addrs: cl.Addrs()})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	reader := newCache(t, plain, Config{KeyPrefix: prefix, Local: local})
	ctx := context.Background()
	// A key on another master than the invalidation channel.
	cc := cl.Client()
	channelNode, _ := cc.MasterForKey(ctx, writer.bcast.channel)
	key, keyNode := "", ""
	for i := 0; key == ""; i++ {
		if n, _ := cc.MasterForKey(ctx, writer.valueKey(fmt.Sprint("k", i))); n.Options().Addr != channelNode.Options().Addr {
			key, keyNode = fmt.Sprint("k", i), n.Options().Addr
		}
	}
	if err := writer.Set(ctx, key, []byte("old"), time.Hour); err != nil {
		t.Fatal(err)
	}
	// A Delete's message, sent alone, has the client load the command
	// table from some master: done now, not through the stall below.
	if _, err := writer.Delete(ctx, "other"); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 2*time.Second, func() bool { // until it is in reader's first layer
		v, _, _ := reader.Get(ctx, key)
		_, cached := reader.local.get(reader.valueKey(key), time.Now())
		return string(v) == "old" && cached
	})
	// The writer's connections to the key's master stall: its DEL times
	// out and reaches Redis when the stall ends. The channel's master
	// answers throughout.
	proxies[keyNode].SetMode(faultproxy.Freeze)
	if _, err := writer.Delete(ctx, key); err == nil {
		t.Fatal("Delete through a stalled connection returned nil")
	}
	proxies[keyNode].SetMode(faultproxy.Forward)
	waitUntil(t, 2*time.Second, func() bool { return cc.Exists(ctx, reader.valueKey(key)).Val() == 0 })
	landed := time.Now()
	waitUntil(t, 3*time.Second, func() bool { return reader.bcast.proofAfter(landed) })
	if v, found, _ := reader.Get(ctx, key); found {
		t.Fatalf("reader still serves %q after the failed Delete reached Redis, which holds nothing", v)
	}
}

// When the invalidation channel's master fails over and stays up as a
// replica, Redis ends its clients' sharded subscriptions (sunsubscribe)
// and goes on answering their pings. The pongs kept the first layer
// trusted with no subscription: every later change went unheard, and
// each process served its copies until Local.TTL. A subscription Redis
// ends or refuses is now replaced on the slot's new master, and only a
// live one's pongs prove anything.
func TestCluster_FailoverOfTheChannelsMaster_InvalidationsStillArrive(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 6-node cluster")
	}
	t.Parallel()
	cl := redistest.StartCluster(t, 3, 1)
	prefix := redistest.Prefix(t)
	local := LocalConfig{MaxEntries: 100, TTL: time.Minute} // interval 1 s, window 2 s
	caches := make([]*Cache, 2)
	for i := range caches {
		c, err := storefx.New("default", storefx.Config{Addrs: cl.Addrs()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		caches[i] = newCache(t, c, Config{KeyPrefix: prefix, Local: local})
	}
	writer, reader := caches[0], caches[1]
	ctx := context.Background()
	cl.TakeOver(cl.MasterOf(writer.bcast.channel))
	keys := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	for _, k := range keys {
		if err := writer.Set(ctx, k, []byte("old"), time.Hour); err != nil {
			t.Fatal(err)
		}
		if v, _, err := reader.Get(ctx, k); string(v) != "old" {
			t.Fatalf("reader Get(%s) = %q, %v", k, v, err)
		}
		if err := writer.Set(ctx, k, []byte("new"), time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	written := time.Now()
	waitUntil(t, 15*time.Second, func() bool { return reader.bcast.proofAfter(written) })
	for _, k := range keys {
		if v, _, err := reader.Get(ctx, k); string(v) != "new" {
			t.Fatalf("reader Get(%s) = %q, %v after the failover, its subscription proven since the write of %q", k, v, err, "new")
		}
	}
}
