package streamfx

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redisfx/redisfx/internal/redistest"
	"github.com/redisfx/redisfx/storefx"
)

// On a Redis Cluster streams and their dead-letter streams sit on
// different slots: consuming, acknowledging and dead-lettering still work.
func TestCluster_ConsumeAndDeadLetterAcrossMasters(t *testing.T) {
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
	s, err := New(client, Config{ClaimIdle: 100 * time.Millisecond, MaxAttempts: 2, Retention: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	prefix := redistest.Prefix(t)
	var mu sync.Mutex
	got := map[string]bool{}
	all := make(chan struct{})
	for i := range 3 {
		stream := fmt.Sprint(prefix, "s", i)
		_ = s.Handle(stream, func(_ context.Context, m Message) error {
			if string(m.Data) == "poison" {
				return errors.New("cannot handle")
			}
			mu.Lock()
			defer mu.Unlock()
			got[stream+string(m.Data)] = true
			if len(got) == 30 {
				close(all)
			}
			return nil
		})
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer s.Stop(context.Background())
	ctx := context.Background()
	for i := range 3 {
		for j := range 10 {
			if _, err := s.Publish(ctx, fmt.Sprint(prefix, "s", i), []byte(fmt.Sprint(j))); err != nil {
				t.Fatal(err)
			}
		}
	}
	_, _ = s.Publish(ctx, prefix+"s0", []byte("poison"))
	wait(t, all, 20*time.Second, "30 messages over 3 masters")
	deadline := time.Now().Add(10 * time.Second)
	for cl.Client().XLen(ctx, prefix+"s0"+DLQSuffix).Val() != 1 {
		if time.Now().After(deadline) {
			t.Fatal("poison message never dead-lettered on the cluster")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
