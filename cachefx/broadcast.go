package cachefx

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"

	"github.com/redisfx/redisfx/internal/nodeclient"
	"github.com/redisfx/redisfx/internal/randid"
	"github.com/redisfx/redisfx/plugintrace"
)

// broadcaster keeps the first layers of every process coherent: a write
// publishes the Redis keys it changed, every other process drops them. A
// pong proves every message published before its ping applied; the layer
// answers only within window of the latest proof (docs/cache.md).
type broadcaster struct {
	rdb      redis.UniversalClient
	channel  string
	sharded  bool
	local    *localLayer
	changed  func(keys ...string) // told of every key another process changed
	self     string               // this process's id: its own messages are skipped
	interval time.Duration
	window   time.Duration

	base     time.Time    // monotonic origin of proof
	proof    atomic.Int64 // every message Redis handled before base+proof has been applied
	live     bool         // confirmed and not ended: only then does a pong prove anything (run's goroutine only)
	refusals int          // subscriptions ended or refused since the last confirmation

	mu     sync.Mutex
	ps     *redis.PubSub
	closed bool
	stop   chan struct{}
	done   chan struct{}
}

func newBroadcaster(rdb redis.UniversalClient, channel string, local *localLayer, ttl time.Duration, changed func(keys ...string)) *broadcaster {
	interval := min(max(ttl/4, 50*time.Millisecond), time.Second)
	b := &broadcaster{
		rdb: rdb, channel: channel, sharded: nodeclient.Cluster(rdb) != nil, local: local, changed: changed, self: randid.Hex(16),
		interval: interval, window: 2 * interval, base: time.Now(), stop: make(chan struct{}),
	}
	b.proof.Store(math.MinInt64 / 2) // nothing proven before the first subscription
	return b
}

// background is the subscription's context: no command spans per ping.
var background = plugintrace.WithoutCommandSpans(context.Background())

func (b *broadcaster) subscribe(ctx context.Context) *redis.PubSub {
	if b.sharded {
		return b.rdb.SSubscribe(ctx, b.channel)
	}
	return b.rdb.Subscribe(ctx, b.channel)
}

// start subscribes and waits for the subscription's confirmation.
func (b *broadcaster) start(ctx context.Context) error {
	ps := b.subscribe(plugintrace.WithoutCommandSpans(ctx))
	if _, err := ps.Receive(ctx); err != nil { // the confirmation: Redis answers it first
		_ = ps.Close()
		return err
	}
	b.confirmed()
	b.mu.Lock()
	b.ps, b.done = ps, make(chan struct{})
	b.mu.Unlock()
	go b.run(b.done)
	return nil
}

func (b *broadcaster) elapsed() int64 { return int64(time.Since(b.base)) }

// trusted reports whether the first layer may answer now.
func (b *broadcaster) trusted() bool {
	return b.elapsed()-b.proof.Load() <= int64(b.window)
}

// confirmed handles a (re)subscription: messages may have been missed
// before it, so the layer starts empty.
func (b *broadcaster) confirmed() {
	b.local.clear()
	b.live, b.refusals = true, 0
	b.proved(b.elapsed())
}

// proved records a proof at elapsed time at. Only run's goroutine (and
// start, before it) writes the proof: trusted only reads it.
func (b *broadcaster) proved(at int64) {
	b.proof.Store(max(at, b.proof.Load()))
}

func (b *broadcaster) current() *redis.PubSub {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	return b.ps
}

func (b *broadcaster) run(done chan struct{}) {
	defer close(done)
	lastPing, lastReplace := b.elapsed(), b.elapsed()
	for {
		ps := b.current()
		if ps == nil {
			return
		}
		now := b.elapsed()
		if now-b.proof.Load() > int64(b.window) && now-lastReplace > int64(b.window) {
			// No proof for a whole window: the connection may be stalled or
			// silently dropping (a NAT that forgot it). Start afresh.
			b.replace(ps)
			lastPing, lastReplace = now, now
			continue
		}
		if now-lastPing >= int64(b.interval) {
			_ = ps.Ping(background, strconv.FormatInt(now, 10))
			lastPing = now
		}
		wait := time.Duration(int64(b.interval) - (b.elapsed() - lastPing))
		msg, err := ps.ReceiveTimeout(background, max(wait, time.Millisecond))
		if err != nil && b.failed(ps, err) || err == nil && b.handle(ps, msg) {
			lastPing, lastReplace = b.elapsed(), b.elapsed()
		}
	}
}

// failed handles a receive error; it reports whether it resubscribed.
func (b *broadcaster) failed(ps *redis.PubSub, err error) (resubscribed bool) {
	if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() {
		return false // time to ping
	}
	b.ended()
	if rerr := redis.Error(nil); errors.As(err, &rerr) {
		// Redis refused the (re)subscription, as a node that no longer
		// owns the channel's slot does (MOVED).
		b.resubscribe(ps)
		return true
	}
	// Closed, or the connection broke: go-redis reconnects on the next
	// receive, and the resubscription's confirmation trusts the layer again.
	select {
	case <-b.stop:
	case <-time.After(min(b.interval, 100*time.Millisecond)):
	}
	return false
}

// handle applies one message of the subscription; it reports whether it
// resubscribed.
func (b *broadcaster) handle(ps *redis.PubSub, msg any) (resubscribed bool) {
	switch m := msg.(type) {
	case *redis.Subscription:
		switch m.Kind {
		case "subscribe", "ssubscribe":
			b.confirmed()
		case "unsubscribe", "sunsubscribe":
			// Redis ended it: a Cluster master that loses the channel's
			// slot unsubscribes its clients and still answers their pings.
			b.ended()
			b.resubscribe(ps)
			return true
		}
	case *redis.Pong:
		if sent, err := strconv.ParseInt(m.Payload, 10, 64); err == nil && b.live {
			b.proved(sent)
		}
	case *redis.Message:
		if sender, keys, ok := strings.Cut(m.Payload, "\n"); ok && sender != b.self {
			if changed, ok := decodeKeys(keys); ok {
				b.local.delete(changed...)
				b.changed(changed...)
			}
		}
	}
	return false
}

// ended handles a subscription known to be gone: the layer answers
// nothing, and pongs prove nothing, until one is confirmed again.
func (b *broadcaster) ended() {
	b.live = false
	b.proof.Store(math.MinInt64 / 2)
}

// resubscribe replaces a subscription that Redis ended or refused, after
// reloading a Cluster's slots (the channel's may have moved) and a wait.
func (b *broadcaster) resubscribe(ps *redis.PubSub) {
	if cc := nodeclient.Cluster(b.rdb); cc != nil {
		cc.ReloadState(background)
	}
	wait := min(b.interval, 100*time.Millisecond) << min(b.refusals, 8)
	b.refusals++
	select {
	case <-b.stop:
		return
	case <-time.After(min(wait, 5*time.Second)):
	}
	b.replace(ps)
}

// replace closes ps and subscribes on a new connection.
func (b *broadcaster) replace(ps *redis.PubSub) {
	b.live = false
	fresh := b.subscribe(background)
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		_ = fresh.Close()
		return
	}
	b.ps = fresh
	b.mu.Unlock()
	_ = ps.Close()
}

// encodeKeys writes the changed keys: a JSON array of strings or, when a
// key is not valid UTF-8 (JSON would mangle it), 'b' and a JSON array of
// the keys' bytes in base64.
func encodeKeys(keys []string) string {
	if !slices.ContainsFunc(keys, func(k string) bool { return !utf8.ValidString(k) }) {
		payload, _ := json.Marshal(keys)
		return string(payload)
	}
	raw := make([][]byte, len(keys))
	for i, k := range keys {
		raw[i] = []byte(k)
	}
	payload, _ := json.Marshal(raw)
	return "b" + string(payload)
}

func decodeKeys(s string) (keys []string, ok bool) {
	rest, binary := strings.CutPrefix(s, "b")
	if !binary {
		return keys, json.Unmarshal([]byte(s), &keys) == nil
	}
	var raw [][]byte
	ok = json.Unmarshal([]byte(rest), &raw) == nil
	for _, k := range raw {
		keys = append(keys, string(k))
	}
	return keys, ok
}

func (b *broadcaster) close() error {
	b.mu.Lock()
	ps, done := b.ps, b.done
	already := b.closed
	b.closed = true
	b.mu.Unlock()
	if already || ps == nil {
		return nil
	}
	close(b.stop)
	err := ps.Close()
	<-done
	return err
}

// publish tells the other processes that keys changed (nil when the
// first layer is off: nobody listens).
func (b *broadcaster) publish(ctx context.Context, c redis.Cmdable, keys ...string) *redis.IntCmd {
	switch {
	case b == nil:
		return nil
	case b.sharded:
		return c.SPublish(ctx, b.channel, b.self+"\n"+encodeKeys(keys))
	}
	return c.Publish(ctx, b.channel, b.self+"\n"+encodeKeys(keys))
}
