package idempotencyfx

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// notifier wakes waiting duplicates when the request they wait for
// completes. The completion script PUBLISHes the outcome on the record key's
// channel (only when someone waits); one shared subscription per process
// receives it, and every waiter of that key in this process is woken by the
// one message (in-process coalescing), with the outcome in hand: no poll,
// no extra round trip.
//
// The subscription connection is opened at the first wait, not at start, so
// an application that never sees a concurrent duplicate holds no extra
// connection. Waiters also poll slowly (Config.PollInterval) in case a
// message is lost, for example while the subscription reconnects.
type notifier struct {
	rdb redis.UniversalClient
	log *zap.Logger

	mu     sync.Mutex
	ps     *redis.PubSub
	topics map[string]*topic
	closed bool
	done   chan struct{} // closed when the receive loop has exited
	stop   chan struct{} // closed by close, to cut a backoff short
}

// topic is the subscription to one record key's channel.
type topic struct {
	refs      int
	confirmed chan struct{} // closed when Redis has confirmed SUBSCRIBE
	ack       bool
	cur       *signal // woken by the next message
}

// signal is one completion, shared by every waiter of a key.
type signal struct {
	fired   chan struct{}
	payload string // state byte + encoded response
}

func newNotifier(rdb redis.UniversalClient, log *zap.Logger) *notifier {
	return &notifier{rdb: rdb, log: log, topics: map[string]*topic{}, stop: make(chan struct{})}
}

// watch subscribes to key's channel (shared with other waiters of the key)
// and returns the signal of its next completion, and a release function.
// It waits, bounded by ctx, until the subscription is confirmed, so a
// completion that happens after watch returns is never missed.
func (n *notifier) watch(ctx context.Context, key string) (*signal, func()) {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return &signal{fired: make(chan struct{})}, func() {}
	}
	t := n.topics[key]
	if t == nil {
		t = &topic{confirmed: make(chan struct{})}
		n.topics[key] = t
		if n.ps == nil {
			n.ps = n.rdb.Subscribe(context.WithoutCancel(ctx), key)
			n.done = make(chan struct{})
			go n.receive(n.ps, n.done)
		} else if err := n.ps.Subscribe(ctx, key); err != nil {
			n.log.Debug("idempotency: subscribe failed; waiting by polling", zap.Error(err))
		}
	}
	t.refs++
	if t.cur == nil {
		t.cur = &signal{fired: make(chan struct{})}
	}
	sig, confirmed := t.cur, t.confirmed
	n.mu.Unlock()

	select {
	case <-confirmed:
	case <-ctx.Done():
	}
	return sig, func() { n.release(key, t) }
}

func (n *notifier) release(key string, t *topic) {
	n.mu.Lock()
	defer n.mu.Unlock()
	t.refs--
	if t.refs > 0 || n.topics[key] != t {
		return
	}
	delete(n.topics, key)
	if n.ps != nil && !n.closed {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = n.ps.Unsubscribe(ctx, key)
	}
}

// receive dispatches messages until the PubSub is closed. go-redis
// reconnects and resubscribes by itself after a connection error.
func (n *notifier) receive(ps *redis.PubSub, done chan struct{}) {
	defer close(done)
	backoff := 50 * time.Millisecond
	for {
		msg, err := ps.Receive(context.Background())
		if err != nil {
			if err == redis.ErrClosed {
				return
			}
			select { // Redis is away; do not spin
			case <-n.stop:
				return
			case <-time.After(backoff):
			}
			if backoff < time.Second {
				backoff *= 2
			}
			continue
		}
		backoff = 50 * time.Millisecond
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				n.mu.Lock()
				if t := n.topics[m.Channel]; t != nil && !t.ack {
					t.ack = true
					close(t.confirmed)
				}
				n.mu.Unlock()
			}
		case *redis.Message:
			n.mu.Lock()
			if t := n.topics[m.Channel]; t != nil && t.cur != nil {
				t.cur.payload = m.Payload
				close(t.cur.fired)
				t.cur = nil
			}
			n.mu.Unlock()
		}
	}
}

// close ends the subscription and waits for the receive loop to exit.
func (n *notifier) close() {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return
	}
	n.closed = true
	close(n.stop)
	ps, done := n.ps, n.done
	n.mu.Unlock()
	if ps != nil {
		_ = ps.Close()
		<-done
	}
}

// topicCount is the number of channels subscribed to (for tests).
func (n *notifier) topicCount() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.topics)
}
