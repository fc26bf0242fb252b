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
	// New refuses a go-redis client without ContextTimeoutEnabled: its
	// Config timeouts could not bound a Redis call. (storefx.New sets it.)
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	defer rdb.Close()
	locks, err := lockfx.New(rdb, lockfx.Config{KeyPrefix: fmt.Sprintf("example:%d:", time.Now().UnixNano()), TTL: 5 * time.Second})
	if err != nil {
		panic(err)
	}
	var tokens []int64
	for range 2 {
		err := locks.WithLock(context.Background(), "account-42", func(ctx context.Context, token int64) error {
			// ctx is cancelled if the lock is lost; token goes with every write
			tokens = append(tokens, token)
			return nil
		})
		if err != nil {
			panic(err)
		}
	}
	fmt.Println("the second holder's token is higher:", tokens[1] > tokens[0])
	// Output:
	// the second holder's token is higher: true
}
