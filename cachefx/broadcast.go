package cachefx

import (
	"context"
	"encoding/json"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/redisfx/redisfx/internal/randid"
)

// broadcaster keeps the first layers of every process coherent: a write or
// delete publishes the Redis keys it changed, and every other process drops
// them from its first layer. A message lost while a subscription
// reconnects is covered by clearing the whole layer on re-subscription; a
// message lost otherwise is covered by the layer's TTL.
type broadcaster struct {
	rdb     redis.UniversalClient
	channel string
	local   *localLayer
	self    string // this process's id: its own messages are skipped

	mu     sync.Mutex
	pubsub *redis.PubSub
	done   chan struct{}
}

func newBroadcaster(rdb redis.UniversalClient, channel string, local *localLayer) *broadcaster {
	return &broadcaster{rdb: rdb, channel: channel, local: local, self: randid.Hex(16)}
}

func (b *broadcaster) start(ctx context.Context) error {
	ps := b.rdb.Subscribe(ctx, b.channel)
	if _, err := ps.Receive(ctx); err != nil { // the subscription is confirmed
		_ = ps.Close()
		return err
	}
	b.mu.Lock()
	b.pubsub, b.done = ps, make(chan struct{})
	b.mu.Unlock()
	go b.run(ps.ChannelWithSubscriptions(), b.done)
	return nil
}

func (b *broadcaster) run(ch <-chan any, done chan struct{}) {
	defer close(done)
	for m := range ch {
		switch m := m.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				b.local.clear() // (re)subscribed: messages may have been missed
			}
		case *redis.Message:
			sender, payload, ok := strings.Cut(m.Payload, "\n")
			if !ok || sender == b.self {
				continue
			}
			var keys []string
			if json.Unmarshal([]byte(payload), &keys) == nil {
				b.local.delete(keys...)
			}
		}
	}
}

func (b *broadcaster) close() error {
	b.mu.Lock()
	ps, done := b.pubsub, b.done
	b.pubsub = nil
	b.mu.Unlock()
	if ps == nil {
		return nil
	}
	err := ps.Close()
	<-done
	return err
}

// publish tells the other processes that keys changed. Best effort: a
// failure leaves their copies to expire with the layer's TTL.
func (b *broadcaster) publish(ctx context.Context, keys ...string) {
	payload, _ := json.Marshal(keys)
	_ = b.rdb.Publish(ctx, b.channel, b.self+"\n"+string(payload)).Err()
}
