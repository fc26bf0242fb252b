package idempotencyfx

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/redisfx/redisfx/internal/redistest"
)

// Issue 14, item 7: a go-redis client that ignores context deadlines
// (ContextTimeoutEnabled false, go-redis's default) cannot honour
// StoreTimeout; New refuses it and says how to fix it.
func TestNew_ClientIgnoringContextDeadlines_Refused(t *testing.T) {
	t.Parallel()
	for name, rdb := range map[string]redis.UniversalClient{
		"client":  redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}),
		"cluster": redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}}),
		"ring":    redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}}),
	} {
		_, err := New(rdb, Config{DefaultTTL: time.Hour})
		_ = rdb.Close()
		if err == nil || !strings.Contains(err.Error(), "ContextTimeoutEnabled") {
			t.Errorf("%s: New = %v, want an error saying to set ContextTimeoutEnabled", name, err)
		}
	}
	if _, err := New(nil, Config{}); err == nil {
		t.Error("New(nil) accepted")
	}
}

// With ContextTimeoutEnabled, StoreTimeout bounds a request against a
// paused Redis (CLIENT PAUSE), whatever client the application built.
func TestStoreTimeout_BoundsPausedRedis_PlainClient(t *testing.T) {
	t.Parallel()
	srv := redistest.StartPrivate(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true, DisableIdentity: true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}})
	t.Cleanup(func() { _ = rdb.Close() })
	svc, err := New(rdb, Config{DefaultTTL: time.Hour, StoreTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Close() })
	srv.Pause(context.Background(), 2*time.Second)
	began := time.Now()
	_, _, err = svc.Do(context.Background(), "paused", "fp", func(context.Context) ([]byte, error) { return nil, nil })
	took := time.Since(began)
	if err == nil {
		t.Fatal("Do succeeded against a paused Redis")
	}
	// 200ms StoreTimeout; the margin is scheduling on a loaded 2-core machine.
	if took > time.Second {
		t.Fatalf("Do took %v against a 200ms StoreTimeout", took)
	}
}
