package streamfx_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisfx/redisfx/streamfx"
)

// A handler per stream; Publish from anywhere. Returning nil acknowledges.
func ExampleStreams_Handle() {
	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	// New refuses a go-redis client without ContextTimeoutEnabled: its
	// Config timeouts could not bound a Redis call. (storefx.New sets it.)
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	defer rdb.Close()
	streams, err := streamfx.New(rdb, streamfx.Config{Retention: time.Minute})
	if err != nil {
		panic(err)
	}
	stream := fmt.Sprintf("example:%d:order.placed", time.Now().UnixNano())
	done := make(chan struct{})
	_ = streams.Handle(stream, func(ctx context.Context, m streamfx.Message) error {
		fmt.Printf("order %s, attempt %d\n", m.Data, m.Attempt)
		close(done)
		return nil
	})
	ctx := context.Background()
	if err := streams.Start(ctx); err != nil {
		panic(err)
	}
	if _, err := streams.Publish(ctx, stream, []byte("A-1001")); err != nil {
		panic(err)
	}
	<-done
	_ = streams.Stop(ctx)
	// Output:
	// order A-1001, attempt 1
}
