package embedded

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestKeysExpireInRealTime(t *testing.T) {
	r, err := Start()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	c := redis.NewClient(&redis.Options{Addr: r.Addr()})
	defer c.Close()
	ctx := context.Background()
	c.Set(ctx, "k", "v", 100*time.Millisecond)
	deadline := time.Now().Add(5 * time.Second)
	for c.Exists(ctx, "k").Val() == 1 {
		if time.Now().After(deadline) {
			t.Fatal("key with a 100ms TTL still there after 5s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
