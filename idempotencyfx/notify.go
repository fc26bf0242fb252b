package idempotencyfx

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/redisfx/redisfx/internal/backoff"
	"github.com/redisfx/redisfx/internal/throttle"
)

// notifier wakes waiting duplicates with the outcome the completion script
// PUBLISHes on the record key's channel, through one subscription per
// process (waiters also poll). One goroutine, run, owns the connection.
type notifier struct {
	rdb     redis.UniversalClient
	log     *zap.Logger
	obs     *observer
	timeout time.Duration // a command on the connection must be answered within this

	mu      sync.Mutex
	topics  map[string]*topic
	running bool
	wake    chan struct{} // (buffered) topics changed: subscribe or unsubscribe
	stop    context.Context
	cancel  context.CancelFunc // called by close
	done    chan struct{}      // closed when run has returned

	deniedLog   throttle.Every
	replacedLog throttle.Every
}

// pingAfter is the silence after which the connection is pinged.
const pingAfter = 5 * time.Second

// topic is the subscription to one record key's channel.
type topic struct {
	refs      int
	sent      bool          // SUBSCRIBE sent on the current connection
	confirmed chan struct{} // closed when the current connection confirmed SUBSCRIBE
	acked     bool
	cur       *signal // woken by the next message
}

// signal is one message on a channel, shared by every waiter of its key.
type signal struct {
	fired   chan struct{}
	payload string // see grantFromMessage
}

func newNotifier(rdb redis.UniversalClient, log *zap.Logger, obs *observer, timeout time.Duration) *notifier {
	n := &notifier{rdb: rdb, log: log, obs: obs, timeout: timeout, topics: map[string]*topic{},
		wake: make(chan struct{}, 1), done: make(chan struct{}),
		deniedLog: throttle.Every{Interval: 10 * time.Second}, replacedLog: throttle.Every{Interval: 10 * time.Second}}
	n.stop, n.cancel = context.WithCancel(context.Background())
	return n
}

// watch is one waiter's interest in a key's channel.
type watch struct {
	n *notifier
	t *topic // one nobody serves once the notifier is closed
}

// watch registers interest in key's channel; it never waits for the network.
func (n *notifier) watch(key string) *watch {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.stop.Err() != nil { // closed: nothing will come
		return &watch{n: n, t: &topic{confirmed: make(chan struct{})}}
	}
	t := n.topics[key]
	if t == nil {
		t = &topic{confirmed: make(chan struct{})}
		n.topics[key] = t
	}
	t.refs++
	if !n.running {
		n.running = true
		go n.run()
	}
	n.kick()
	return &watch{n: n, t: t}
}

// kick tells run that the topics changed. n.mu is held.
func (n *notifier) kick() {
	select {
	case n.wake <- struct{}{}:
	default:
	}
}

// signal returns the signal of the next message on the channel.
func (w *watch) signal() *signal {
	w.n.mu.Lock()
	defer w.n.mu.Unlock()
	if w.t.cur == nil {
		w.t.cur = &signal{fired: make(chan struct{})}
	}
	return w.t.cur
}

// confirmed is closed once the subscription is in place on the current connection.
func (w *watch) confirmed() <-chan struct{} {
	w.n.mu.Lock()
	defer w.n.mu.Unlock()
	return w.t.confirmed
}

// release ends the interest; the last waiter's release lets run unsubscribe.
func (w *watch) release() {
	w.n.mu.Lock()
	defer w.n.mu.Unlock()
	w.t.refs--
	if w.t.refs == 0 {
		w.n.kick()
	}
}

// run serves subscription connections until close, replacing each that breaks.
func (n *notifier) run() {
	defer close(n.done)
	pause := backoff.Backoff{Min: 50 * time.Millisecond, Max: 2 * time.Second}
	for {
		began := time.Now()
		err := n.serve(n.rdb.Subscribe(context.Background()))
		if errors.Is(err, errStopped) {
			return
		}
		n.obs.notificationFailure(notifyConnectionReplaced)
		if n.replacedLog.Allow() {
			n.log.Warn("idempotency: the pub/sub connection that wakes waiting duplicates failed; replacing it (waiters poll meanwhile)",
				zap.Error(err))
		}
		if time.Since(began) > 10*time.Second {
			pause.Reset()
		}
		if !pause.Wait(n.stop) {
			return
		}
	}
}

var (
	errStopped = errors.New("notifier closed")
	errSilent  = errors.New("no reply on the pub/sub connection within StoreTimeout")
)

// conn is the state of one subscription connection.
type conn struct {
	ps     *redis.PubSub
	broken chan struct{} // closed by receive when the connection fails
	err    error         // why, set before broken is closed

	// Times since born (monotonic): when the oldest command still unanswered
	// was sent (0: none), and when the connection last delivered anything.
	born            time.Time
	awaiting, heard atomic.Int64
}

func (c *conn) sent() { c.awaiting.CompareAndSwap(0, int64(time.Since(c.born))) }

func (c *conn) received() {
	c.awaiting.Store(0)
	c.heard.Store(int64(time.Since(c.born)))
}

// silent reports whether a command went unanswered for timeout, and whether
// the connection has been quiet for pingAfter.
func (c *conn) silent(timeout time.Duration) (dead, idle bool) {
	now := time.Since(c.born)
	if at := c.awaiting.Load(); at != 0 {
		return now-time.Duration(at) > timeout, false
	}
	return false, now-time.Duration(c.heard.Load()) > pingAfter
}

// serve runs one connection until it breaks or the notifier closes.
func (n *notifier) serve(ps *redis.PubSub) error {
	c := &conn{ps: ps, broken: make(chan struct{}), born: time.Now()}
	n.mu.Lock()
	for _, t := range n.topics { // a new connection: every channel anew
		t.sent = false
		if t.acked {
			t.acked, t.confirmed = false, make(chan struct{})
		}
	}
	n.mu.Unlock()
	go n.receive(c)
	defer func() { _ = ps.Close(); <-c.broken }() // receive closes broken as it returns

	tick := time.NewTicker(min(max(n.timeout/4, 10*time.Millisecond), 250*time.Millisecond))
	defer tick.Stop()
	for {
		if err := n.sync(c); err != nil {
			return err
		}
		select {
		case <-n.stop.Done():
			return errStopped
		case <-c.broken:
			return c.err
		case <-n.wake:
		case <-tick.C:
			dead, idle := c.silent(n.timeout)
			if dead {
				return errSilent
			}
			if idle {
				if err := n.command(c, func(ctx context.Context) error { return ps.Ping(ctx) }); err != nil {
					return err
				}
			}
		}
	}
}

// sync subscribes to new topics and unsubscribes from abandoned ones.
func (n *notifier) sync(c *conn) error {
	var sub, unsub []string
	n.mu.Lock()
	for key, t := range n.topics {
		switch {
		case t.refs == 0:
			delete(n.topics, key)
			if t.sent {
				unsub = append(unsub, key)
			}
		case !t.sent:
			t.sent = true
			sub = append(sub, key)
		}
	}
	n.mu.Unlock()
	if len(unsub) > 0 {
		if err := n.command(c, func(ctx context.Context) error { return c.ps.Unsubscribe(ctx, unsub...) }); err != nil {
			return err
		}
	}
	if len(sub) == 0 {
		return nil
	}
	return n.command(c, func(ctx context.Context) error { return c.ps.Subscribe(ctx, sub...) })
}

// command sends one command, bounded by timeout; its reply comes through receive.
func (n *notifier) command(c *conn, send func(context.Context) error) error {
	c.sent()
	ctx, cancel := context.WithTimeout(context.Background(), n.timeout)
	defer cancel()
	return send(ctx)
}

// receive dispatches what the connection delivers until it fails.
func (n *notifier) receive(c *conn) {
	for {
		msg, err := c.ps.Receive(context.Background())
		if err != nil {
			var reply redis.Error
			if errors.As(err, &reply) { // Redis answered, with an error
				c.received()
				n.refused(err)
				continue
			}
			c.err = err
			close(c.broken)
			return
		}
		c.received()
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				n.mu.Lock()
				if t := n.topics[m.Channel]; t != nil && t.sent && !t.acked {
					t.acked = true
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

// refused handles an error reply on the subscription connection.
func (n *notifier) refused(err error) {
	if redis.IsPermissionError(err) {
		n.obs.notificationFailure(notifySubscribeDenied)
	}
	if n.deniedLog.Allow() {
		n.log.Warn("idempotency: Redis refused the subscription that wakes waiting duplicates; they fall back to polling every PollInterval. "+
			"Grant the Redis user the channels of KeyPrefix (ACL SETUSER <user> &<KeyPrefix>*)", zap.Error(err))
	}
}

// close ends the subscription and waits for run; waiters go on polling.
func (n *notifier) close() {
	n.mu.Lock()
	n.cancel()
	running := n.running
	n.mu.Unlock()
	if running {
		<-n.done
	}
}
