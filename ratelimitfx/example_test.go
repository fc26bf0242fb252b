package ratelimitfx_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisfx/redisfx/ratelimitfx"
)

// Check limits work that is not HTTP: here, 2 password resets per hour per
// account.
func ExampleLimiter_Check() {
	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	// New refuses a go-redis client without ContextTimeoutEnabled: its
	// Config timeouts could not bound a Redis call. (storefx.New sets it.)
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	defer rdb.Close()
	limiter, err := ratelimitfx.New(rdb, ratelimitfx.Config{KeyPrefix: fmt.Sprintf("example:%d:", time.Now().UnixNano())})
	if err != nil {
		panic(err)
	}
	resets := ratelimitfx.Rule{Name: "password-reset", Limit: 2, Window: time.Hour}
	for range 3 {
		d, err := limiter.Check(context.Background(), resets, "account-42")
		if err != nil {
			panic(err)
		}
		fmt.Println(d.Allowed, d.Remaining)
	}
	// Output:
	// true 1
	// true 0
	// false 0
}
