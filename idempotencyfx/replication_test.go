package idempotencyfx

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/redisfx/redisfx/internal/redistest"
	"github.com/redisfx/redisfx/storefx"
)

// With ReplicaAcks, a claim that writes waits until a replica has it: the
// record is on the replica when the handler starts. Without a reachable
// replica the claim (and the completion) stand and are counted as
// unreplicated.
func TestReplicaAcks_ClaimReachesReplicaBeforeHandler(t *testing.T) {
	t.Parallel()
	primary := redistest.StartPrivate(t)
	host, port, _ := strings.Cut(primary.Addr(), ":")
	replica := redistest.StartPrivate(t, redistest.WithArgs("--replicaof", host, port))
	ctx := context.Background()
	waitFor(t, func() bool {
		info := replica.Client().Info(ctx, "replication").Val()
		return strings.Contains(info, "master_link_status:up")
	})
	client, err := storefx.New("default", storefx.Config{URL: primary.URL()})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	// A generous ReplicaAckTimeout: on a loaded machine a healthy replica
	// can take longer than a second to acknowledge.
	svc, err := New(client, Config{DefaultTTL: time.Minute, ReplicaAcks: 1, ReplicaAckTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	for i := 0; i < 20; i++ {
		key := "k" + strconv.Itoa(i)
		_, _, err := svc.Do(ctx, key, "fp", func(context.Context) ([]byte, error) {
			// The claim is on the replica before the work starts.
			if s := replica.Client().HGet(ctx, svc.StoreKey("", key), "s").Val(); s != "p" {
				t.Errorf("%s: replica has state %q while the handler runs", key, s)
			}
			return []byte("ok"), nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	replica.Kill() // no replica left: claims stand, and are counted
	reg := prometheus.NewRegistry()
	alone, err := New(client, Config{DefaultTTL: time.Minute, ReplicaAcks: 1, ReplicaAckTimeout: 200 * time.Millisecond}, WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	defer alone.Close()
	if _, _, err := alone.Do(ctx, "alone", "fp", func(context.Context) ([]byte, error) { return nil, nil }); err != nil {
		t.Fatal(err)
	}
	for _, oc := range []Outcome{OutcomeUnreplicated, OutcomeUnreplicatedCompletion} {
		if n := testutil.ToFloat64(alone.obs.requests.WithLabelValues(string(oc))); n != 1 {
			t.Fatalf("%s counted %v, want 1", oc, n)
		}
	}
}

// BenchmarkNewKey_ReplicaAcks1: the cost of WAIT 1 on the new-key path,
// against BenchmarkNewKey_NoReplicaAcks on the same primary and replica.
func BenchmarkNewKey_ReplicaAcks1(b *testing.B)  { benchReplicaAcks(b, 1) }
func BenchmarkNewKey_NoReplicaAcks(b *testing.B) { benchReplicaAcks(b, 0) }

func benchReplicaAcks(b *testing.B, acks int) {
	primary := redistest.StartPrivate(b)
	host, port, _ := strings.Cut(primary.Addr(), ":")
	replica := redistest.StartPrivate(b, redistest.WithArgs("--replicaof", host, port))
	ctx := context.Background()
	for !strings.Contains(replica.Client().Info(ctx, "replication").Val(), "master_link_status:up") {
		time.Sleep(10 * time.Millisecond)
	}
	client, _ := storefx.New("default", storefx.Config{URL: primary.URL()})
	defer client.Close()
	svc, err := New(client, Config{DefaultTTL: time.Minute, ReplicaAcks: acks, ReplicaAckTimeout: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer svc.Close()
	i := 0
	for b.Loop() {
		i++
		_, _, _ = svc.Do(ctx, "k"+strconv.Itoa(i), "fp", func(context.Context) ([]byte, error) { return nil, nil })
	}
}

// With ReplicaAcks, the outcome waits for the replicas too: a failover after
// the answer must not bring back the in-progress record, whose lease would
// run out and let a retry run the work again. Here the replica dies while
// the work runs (its claim was acknowledged): the completion's WAIT falls
// short, the outcome stands, and it is counted as unreplicated.
func TestReplicaAcks_CompletionWaitsForTheReplica(t *testing.T) {
	t.Parallel()
	primary := redistest.StartPrivate(t)
	host, port, _ := strings.Cut(primary.Addr(), ":")
	replica := redistest.StartPrivate(t, redistest.WithArgs("--replicaof", host, port))
	ctx := context.Background()
	waitFor(t, func() bool {
		return strings.Contains(replica.Client().Info(ctx, "replication").Val(), "master_link_status:up")
	})
	client, err := storefx.New("default", storefx.Config{URL: primary.URL()})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	reg := prometheus.NewRegistry()
	svc, err := New(client, Config{DefaultTTL: time.Minute, ReplicaAcks: 1, ReplicaAckTimeout: 5 * time.Second}, WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	unreplicated := func() float64 {
		return testutil.ToFloat64(svc.obs.requests.WithLabelValues(string(OutcomeUnreplicated))) +
			testutil.ToFloat64(svc.obs.requests.WithLabelValues(string(OutcomeUnreplicatedCompletion)))
	}
	// A healthy replica has the outcome when Do returns.
	if _, _, err := svc.Do(ctx, "healthy", "fp", func(context.Context) ([]byte, error) { return []byte("ok"), nil }); err != nil {
		t.Fatal(err)
	}
	if s := replica.Client().HGet(ctx, svc.StoreKey("", "healthy"), "s").Val(); s != "c" {
		t.Fatalf("the replica has state %q after Do returned", s)
	}
	if n := unreplicated(); n != 0 {
		t.Fatalf("%v unreplicated writes with a healthy replica", n)
	}
	short, err := New(client, Config{DefaultTTL: time.Minute, ReplicaAcks: 1, ReplicaAckTimeout: 300 * time.Millisecond}, WithRegisterer(prometheus.NewRegistry()))
	if err != nil {
		t.Fatal(err)
	}
	defer short.Close()
	result, _, err := short.Do(ctx, "replica-dies", "fp", func(context.Context) ([]byte, error) {
		replica.Kill()
		return []byte("done"), nil
	})
	if err != nil || string(result) != "done" {
		t.Fatalf("Do = %q, %v", result, err)
	}
	if c, d := testutil.ToFloat64(short.obs.requests.WithLabelValues(string(OutcomeUnreplicated))),
		testutil.ToFloat64(short.obs.requests.WithLabelValues(string(OutcomeUnreplicatedCompletion))); c != 0 || d != 1 {
		t.Fatalf("unreplicated claims %v, completions %v; want 0 and 1", c, d)
	}
	if rec, err := short.Get(ctx, "", "replica-dies"); err != nil || rec == nil || rec.State != StateCompleted {
		t.Fatalf("the outcome does not stand: %+v, %v", rec, err)
	}
}
