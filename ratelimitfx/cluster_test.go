package ratelimitfx

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redisfx/redisfx/internal/redistest"
	"github.com/redisfx/redisfx/storefx"
)

// On a Redis Cluster each client's counter lives on its own slot; limits
// stay exact per client.
func TestCluster_ExactPerClientAcrossMasters(t *testing.T) {
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
	for _, alg := range []Algorithm{FixedWindow, SlidingLog} {
		l, err := New(client, Config{KeyPrefix: redistest.Prefix(t), Algorithm: alg, Limit: 5, Window: time.Minute,
			StoreTimeout: 30 * time.Second}) // exact counts: no fail-open on a loaded machine
		if err != nil {
			t.Fatal(err)
		}
		allowed := make([]atomic.Int64, 6)
		var wg sync.WaitGroup
		for i := range 60 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				d, err := l.Check(context.Background(), Rule{Name: string(alg)}, fmt.Sprint("client-", i%6))
				if err != nil {
					t.Error(err)
				}
				if d.Allowed {
					allowed[i%6].Add(1)
				}
			}()
		}
		wg.Wait()
		for i := range allowed {
			if n := allowed[i].Load(); n != 5 {
				t.Errorf("%s: client-%d allowed %d of 10, want 5", alg, i, n)
			}
		}
	}
}
