package idempotencyfx

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

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
	if os.Getenv("REDISFX_TEST_CLUSTER") == "" {
		t.Skip("a Cluster test: make test-cluster (REDISFX_TEST_CLUSTER=1)")
	}
	cl := redistest.StartCluster(t, 3, 0)
	client, err := storefx.New("default", storefx.Config{Addrs: cl.Addrs(), ConnectTimeout: time.Second, ReadTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	cfg := Config{KeyPrefix: "rec:", StoreTimeout: 100 * time.Millisecond, DefaultTTL: time.Hour}
	ctx := context.Background()
	dead, err := New(client, cfg, withStreamsOf(t, client))
	if err != nil {
		t.Fatal(err)
	}
	_ = dead.Start(ctx)
	dead.outbox.shutdown(ctx) // it commits, but relays nothing
	stream := "rec:events"
	_, _, err = dead.Do(ctx, "k1", "fp", func(ctx context.Context) ([]byte, error) {
		return []byte("ok"), Emit(ctx, stream, []byte("paid"))
	})
	if err != nil {
		t.Fatal(err)
	}
	other, err := New(client, cfg, withStreamsOf(t, client), fastOutbox)
	if err != nil {
		t.Fatal(err)
	}
	_ = other.Start(ctx)
	t.Cleanup(func() { _ = other.Close() })
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if n, _ := client.XLen(ctx, stream).Result(); n == 1 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("the event a dead process committed was not delivered in 5 s (the recovery reads %d indexes per poll within StoreTimeout %v)",
		len(other.outbox.indexes()), cfg.StoreTimeout)
}

// While one master does not answer, the recovery still delivers what the
// others hold: an index it cannot read is skipped, not the whole poll, and
// its node is not asked again in the poll, which so waits one StoreTimeout
// for it, not one per chunk of its slots (about 11: 5 s here).
func TestOutbox_Cluster_RecoveryDeliversWhileAnotherMasterIsDown(t *testing.T) {
	if os.Getenv("REDISFX_TEST_CLUSTER") == "" {
		t.Skip("a Cluster test: make test-cluster (REDISFX_TEST_CLUSTER=1)")
	}
	cl := redistest.StartCluster(t, 3, 0)
	client, err := storefx.New("default", storefx.Config{Addrs: cl.Addrs(), ConnectTimeout: time.Second, ReadTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	cfg := Config{KeyPrefix: "rec:", StoreTimeout: 500 * time.Millisecond, DefaultTTL: time.Hour}
	ctx := context.Background()
	dead, err := New(client, cfg, withStreamsOf(t, client))
	if err != nil {
		t.Fatal(err)
	}
	_ = dead.Start(ctx)
	dead.outbox.shutdown(ctx) // it commits, but relays nothing
	// The stream on the record's master, in another slot: the relay's path.
	record := storeKey(cfg.KeyPrefix, "", "k1")
	home := cl.MasterOf(record)
	stream := ""
	for i := 0; stream == ""; i++ {
		if s := "rec:events:" + strconv.Itoa(i); cl.MasterOf(s) == home && keyslot.Of(s) != keyslot.Of(record) {
			stream = s
		}
	}
	_, _, err = dead.Do(ctx, "k1", "fp", func(ctx context.Context) ([]byte, error) {
		return []byte("ok"), Emit(ctx, stream, []byte("paid"))
	})
	if err != nil {
		t.Fatal(err)
	}
	// Paused: a master that holds neither the record nor the recovery's
	// lease, and the outbox indexes of about a third of the slots.
	lease := cl.MasterOf(cfg.KeyPrefix + ":outbox:relay")
	for _, n := range cl.Nodes {
		if n != home && n != lease && strings.Contains(n.Client().Info(ctx, "replication").Val(), "role:master") {
			n.Pause(ctx, 10*time.Second)
			break
		}
	}
	other, err := New(client, cfg, withStreamsOf(t, client), fastOutbox)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Second)
	_ = other.Start(ctx) // its recovery starts first; its preloading waits for the paused master
	t.Cleanup(func() { _ = other.Close() })
	for time.Now().Before(deadline) {
		if n, _ := home.Client().XLen(ctx, stream).Result(); n == 1 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("the event a dead process committed was not delivered in 3 s while another master was paused")
}
