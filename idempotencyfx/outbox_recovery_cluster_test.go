package idempotencyfx

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisfx/redisfx/internal/keyslot"
	"github.com/redisfx/redisfx/internal/redistest"
	"github.com/redisfx/redisfx/storefx"
)

// On a Cluster, with a prefix without a hash tag, the recovery reads one
// outbox index per slot: 16,384 ZRANGE and 16,384 ZCARD in one pipeline,
// within one StoreTimeout, and the pending records with what is left of
// it. Where that does not fit (a short StoreTimeout, a loaded host: the
// Cluster checker's instances, StoreTimeout 1 s under -race, saw every
// poll fail for 20 s), no poll ever delivers what a dead process
// committed, and the events are lost when their records expire. This
// test gives the recovery 5 s to deliver one event with StoreTimeout
// 100 ms, a setting that bounds each call of a request well.
func TestOutbox_Cluster_RecoveryDeliversWithAShortStoreTimeout(t *testing.T) {
	cl, cfg, stream := clusterWithDeadCommit(t, 100*time.Millisecond, func(*redistest.Cluster, string) string { return "rec:events" })
	other := startRecovery(t, cl, cfg)
	if !delivered(cl.Client(), stream, time.Now().Add(5*time.Second)) {
		t.Fatalf("the event a dead process committed was not delivered in 5 s (the recovery reads %d indexes per poll within StoreTimeout %v)",
			len(other.outbox.indexes()), cfg.StoreTimeout)
	}
}

// While one master does not answer, the recovery still delivers what the
// others hold: an index it cannot read is skipped, not the whole poll, and
// its node is not asked again in the poll, which so waits one StoreTimeout
// for it, not one per chunk of its slots (about 11: 5 s here).
func TestOutbox_Cluster_RecoveryDeliversWhileAnotherMasterIsDown(t *testing.T) {
	var home *redistest.Server
	// The stream on the record's master, in another slot: the relay's path.
	cl, cfg, stream := clusterWithDeadCommit(t, 500*time.Millisecond, func(cl *redistest.Cluster, record string) string {
		home = cl.MasterOf(record)
		for i := 0; ; i++ {
			if s := "rec:events:" + strconv.Itoa(i); cl.MasterOf(s) == home && keyslot.Of(s) != keyslot.Of(record) {
				return s
			}
		}
	})
	// Paused: a master that holds neither the record nor the recovery's
	// lease, and the outbox indexes of about a third of the slots.
	ctx := context.Background()
	lease := cl.MasterOf(cfg.KeyPrefix + ":outbox:relay")
	for _, n := range cl.Nodes {
		if n != home && n != lease && strings.Contains(n.Client().Info(ctx, "replication").Val(), "role:master") {
			n.Pause(ctx, 10*time.Second)
			break
		}
	}
	deadline := time.Now().Add(3 * time.Second)
	startRecovery(t, cl, cfg) // its recovery starts first; its preloading waits for the paused master
	if !delivered(home.Client(), stream, deadline) {
		t.Fatal("the event a dead process committed was not delivered in 3 s while another master was paused")
	}
}

// clusterWithDeadCommit starts a Cluster and commits one event, to the
// stream pick names for the record of key k1, from a Service whose relay
// has stopped: a process that died after its commit.
func clusterWithDeadCommit(t *testing.T, storeTimeout time.Duration, pick func(cl *redistest.Cluster, record string) string) (*redistest.Cluster, Config, string) {
	if os.Getenv("REDISFX_TEST_CLUSTER") == "" {
		t.Skip("a Cluster test: make test-cluster (REDISFX_TEST_CLUSTER=1)")
	}
	cl := redistest.StartCluster(t, 3, 0)
	cfg := Config{KeyPrefix: "rec:", StoreTimeout: storeTimeout, DefaultTTL: time.Hour}
	ctx := context.Background()
	client := clusterStore(t, cl)
	dead, err := New(client, cfg, withStreamsOf(t, client))
	if err != nil {
		t.Fatal(err)
	}
	_ = dead.Start(ctx)
	dead.outbox.shutdown(ctx) // it commits, but relays nothing
	stream := pick(cl, storeKey(cfg.KeyPrefix, "", "k1"))
	if _, _, err = dead.Do(ctx, "k1", "fp", func(ctx context.Context) ([]byte, error) {
		return []byte("ok"), Emit(ctx, stream, []byte("paid"))
	}); err != nil {
		t.Fatal(err)
	}
	return cl, cfg, stream
}

// startRecovery starts another process, whose recovery polls at once.
func startRecovery(t *testing.T, cl *redistest.Cluster, cfg Config) *Service {
	client := clusterStore(t, cl)
	other, err := New(client, cfg, withStreamsOf(t, client), fastOutbox)
	if err != nil {
		t.Fatal(err)
	}
	_ = other.Start(context.Background())
	t.Cleanup(func() { _ = other.Close() })
	return other
}

// clusterStore is a storefx client of cl.
func clusterStore(t *testing.T, cl *redistest.Cluster) redis.UniversalClient {
	client, err := storefx.New("default", storefx.Config{Addrs: cl.Addrs(), ConnectTimeout: time.Second, ReadTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	return client
}

// delivered reports whether stream holds one entry before deadline.
func delivered(rdb redis.Cmdable, stream string, deadline time.Time) bool {
	for time.Now().Before(deadline) {
		if n, _ := rdb.XLen(context.Background(), stream).Result(); n == 1 {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}
