package lockfx_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisfx/redisfx/lockfx"
)

// WithLock runs a function while holding a lock; the fencing token lets a
// downstream store refuse writes from a holder whose lease ran out.
func ExampleLocker_WithLock() {
	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	locks, err := lockfx.New(rdb, lockfx.Config{KeyPrefix: fmt.Sprintf("example:%d:", time.Now().UnixNano()), TTL: 5 * time.Second})
	if err != nil {
		panic(err)
	}
	for range 2 {
		err := locks.WithLock(context.Background(), "account-42", func(ctx context.Context, token int64) error {
			fmt.Println("holding the lock, token", token)
			return nil
		})
		if err != nil {
			panic(err)
		}
	}
	// Output:
	// holding the lock, token 1
	// holding the lock, token 2
}
