package cachefx

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

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
