package cachefx_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisfx/redisfx/cachefx"
)

type product struct {
	SKU   string `json:"sku"`
	Price int    `json:"price"`
}

// GetOrLoadJSON reads through the cache: the loader runs only on a miss,
// once per key however many callers ask at the same time.
func Example() {
	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	// New refuses a go-redis client without ContextTimeoutEnabled: its
	// Config timeouts could not bound a Redis call. (storefx.New sets it.)
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	defer rdb.Close()
	cache, err := cachefx.New(rdb, cachefx.Config{KeyPrefix: fmt.Sprintf("example:%d:", time.Now().UnixNano()), Namespace: "products"})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	loads := 0
	load := func(context.Context) (product, error) { loads++; return product{SKU: "sku-1", Price: 4200}, nil }
	for range 3 {
		p, err := cachefx.GetOrLoadJSON(ctx, cache, "sku-1", time.Minute, load, "shoes")
		if err != nil {
			panic(err)
		}
		fmt.Println(p.SKU, p.Price)
	}
	n, _ := cache.InvalidateByTags(ctx, "shoes")
	fmt.Println("loads:", loads, "invalidated:", n)
	// Output:
	// sku-1 4200
	// sku-1 4200
	// sku-1 4200
	// loads: 1 invalidated: 1
}
