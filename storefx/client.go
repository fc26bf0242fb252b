package storefx

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"sort"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/fx"

	"github.com/redisfx/redisfx/plugintrace"
)

// ClientInfo describes a client to the instrumentation that hooks into it.
type ClientInfo struct {
	// Name is the client's name: DefaultClientName, or the name given to
	// NamedClient. Command spans carry it as redisfx.client.
	Name string
	// Addrs are the configured addresses (seed nodes for a Cluster).
	Addrs []string
	// Network is "tcp" or "unix".
	Network string
	// Node is the address of the one server whose commands the hook sees:
	// the standalone server, or the Cluster node the hook is attached to.
	// It is "" for a Sentinel client, whose master can change.
	Node string
	// DB is the database index (always 0 on a Cluster).
	DB int
	// Cluster is true for a Cluster client, and so for the hooks of its nodes.
	Cluster bool
}

// Instrumentation builds a go-redis hook for a client. Modules such as
// tracingfx contribute one to the value group "redisfx.store.instrumentation"
// (see AsInstrumentation); every client that storefx builds gets a hook from
// each. A nil hook is skipped.
//
// On a Cluster the hooks are per node, as go-redis's redisotel attaches
// them: storefx calls the Instrumentation for each node the client opens
// (ClusterClient.OnNewNode), with ClientInfo.Node naming it, so a hook sees
// the commands that node served, including a redirected attempt (MOVED,
// ASK) and the client's own slot-map reloads.
type Instrumentation func(ClientInfo) redis.Hook

// AsInstrumentation annotates a constructor of an Instrumentation so that its
// result joins the group that storefx applies to every client.
func AsInstrumentation(constructor any) any {
	return fx.Annotate(constructor, fx.ResultTags(`group:"`+InstrumentationGroup+`"`))
}

// Client is a Redis client together with its name.
type Client struct {
	redis.UniversalClient
	Details ClientInfo

	breakers *breakerSet // nil when Config.Breaker.Disabled
	setup    setupFields // the fields to name when Redis refuses a connection's set-up
}

// New builds a client from cfg without Fx. It does not connect: use
// (*Registry).Ping or the client's own Ping to check the server.
func New(name string, cfg Config, inst ...Instrumentation) (*Client, error) {
	opts, err := cfg.options()
	if err != nil {
		return nil, err
	}
	info := ClientInfo{Name: name, Addrs: append([]string(nil), opts.Addrs...), Network: "tcp", DB: opts.DB}
	if opts.Dialer != nil {
		info.Network = "unix"
	}
	if opts.MasterName == "" && (len(opts.Addrs) > 1 || opts.IsClusterMode) {
		// As NewUniversalClient would, but with a slot map that follows a
		// failover within seconds instead of a minute.
		co := opts.Cluster()
		co.ClusterStateReloadInterval = cfg.ClusterStateReloadInterval
		if co.ClusterStateReloadInterval == 0 {
			co.ClusterStateReloadInterval = 2 * time.Second
		}
		if co.PoolSize == 0 {
			// go-redis gives a Cluster node 5 per CPU, half its standalone
			// default; Config.PoolSize promises 10 per CPU per node.
			co.PoolSize = 10 * runtime.GOMAXPROCS(0)
		}
		c := redis.NewClusterClient(co)
		info.DB, info.Cluster = 0, true
		bs := newBreakerSet(cfg.Breaker)
		// Nodes are opened lazily, after this: each gets its own hooks, and
		// its own circuit breaker (the first hook, so a refused command
		// makes no span): a dead master must not stop the others.
		c.OnNewNode(func(node *redis.Client) {
			nodeInfo := info
			nodeInfo.Node = node.Options().Addr
			bs.add(node)
			addHooks(node, nodeInfo, inst)
		})
		return &Client{UniversalClient: c, Details: info, breakers: bs, setup: setupFieldsOf(cfg, opts)}, nil
	}
	c := redis.NewUniversalClient(opts)
	bs := newBreakerSet(cfg.Breaker)
	bs.add(c) // first: the outermost hook, so a refused command makes no span
	if opts.MasterName == "" && len(opts.Addrs) > 0 {
		info.Node = opts.Addrs[0]
	}
	addHooks(c, info, inst)
	return &Client{UniversalClient: c, Details: info, breakers: bs, setup: setupFieldsOf(cfg, opts)}, nil
}

// addHooks adds to c the hook each Instrumentation builds for info.
func addHooks(c redis.UniversalClient, info ClientInfo, inst []Instrumentation) {
	for _, f := range inst {
		if f == nil {
			continue
		}
		if h := f(info); h != nil {
			c.AddHook(h)
		}
	}
}

// Registry knows every client that storefx built in an application, by name,
// and the result of each one's background health check (Watch), which the
// HTTP layer's /readyz and the store_up gauge read.
type Registry struct {
	mu      sync.RWMutex
	clients map[string]*Client
	probes  map[string]*probe
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{clients: map[string]*Client{}, probes: map[string]*probe{}}
}

// Add registers c under its name; a second client with the same name is an error.
func (r *Registry) Add(c *Client) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.clients[c.Details.Name]; dup {
		return fmt.Errorf("storefx: two clients named %q", c.Details.Name)
	}
	r.clients[c.Details.Name] = c
	return nil
}

// Client returns the client called name, or nil.
func (r *Registry) Client(name string) *Client {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.clients[name]
}

// Names lists the registered client names in order.
func (r *Registry) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	names := make([]string, 0, len(r.clients))
	for n := range r.clients {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Ping checks every registered client once, now, and returns the first
// failure, naming the client and its address. It waits for Redis (up to
// ctx's deadline); Ready answers from the background health checks instead.
func (r *Registry) Ping(ctx context.Context) error {
	for _, n := range r.Names() {
		c := r.Client(n)
		if err := c.Ping(ctx).Err(); err != nil {
			return fmt.Errorf("storefx: client %q at %v: %w", n, c.Details.Addrs, err)
		}
	}
	return nil
}

// connect pings the client until it answers, with a backoff, for at most the
// configured ConnectTimeout (or until ctx ends). The error names the address.
// The pings make no command span: a start is not a trace.
//
// A server that answers with an error was reached: a refusal that retrying
// cannot change (a wrong password, a database it does not have) fails at
// once, naming the field to fix; one that may pass (LOADING, BUSY …) is
// retried, and reported as such, never as "unreachable".
func connect(ctx context.Context, c *Client, timeout time.Duration) error {
	// The start-up PINGs pass the breaker and are not counted by it: after
	// five of them it would open, and its refusal, not the real cause,
	// would end the start-up error.
	ctx, cancel := context.WithTimeout(withProbe(plugintrace.WithoutCommandSpans(ctx)), timeout)
	defer cancel()
	backoff := 25 * time.Millisecond
	attempts := 0
	var cause error        // the last error that was not our own deadline
	causeAnswered := false // cause is an answer of Redis: it is reachable, not ready
	for {
		attempts++
		err := c.Ping(ctx).Err()
		if err == nil {
			return nil
		}
		answered, refusal := c.setup.classify(err)
		if refusal != nil {
			return fmt.Errorf("storefx: client %q: Redis at %v answered and refused the connection: %w",
				c.Details.Name, c.Details.Addrs, refusal)
		}
		if cause == nil || ctx.Err() == nil || !errors.Is(err, ctx.Err()) {
			cause, causeAnswered = err, answered
		}
		wait := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			wait.Stop()
			if errors.Is(cause, ctx.Err()) {
				// go-redis retried dialing until our deadline and returned the
				// deadline, not why it could not connect: find out.
				cause = diagnose(c.Details)
			}
			if causeAnswered {
				return fmt.Errorf("storefx: client %q: Redis at %v answered but was not ready (%d attempts in %v): %w",
					c.Details.Name, c.Details.Addrs, attempts, timeout, cause)
			}
			return fmt.Errorf("storefx: client %q: Redis at %v is unreachable (%d attempts in %v): %w",
				c.Details.Name, c.Details.Addrs, attempts, timeout, cause)
		case <-wait.C:
		}
		if backoff < 500*time.Millisecond {
			backoff *= 2
		}
	}
}

// diagnose dials the first address of a client that did not answer, to name
// the cause of a failed start: "connection refused", "no such host", or a
// server that accepts connections but does not answer in time.
func diagnose(info ClientInfo) error {
	if len(info.Addrs) == 0 {
		return errors.New("no address")
	}
	conn, err := net.DialTimeout(info.Network, info.Addrs[0], time.Second)
	if err != nil {
		return err
	}
	_ = conn.Close()
	return errors.New("the server accepts connections but did not answer PING in time (overloaded, paused, or not Redis?)")
}

// Unwrap returns the go-redis client itself (*redis.Client,
// *redis.ClusterClient …), for code that needs its concrete type.
func (c *Client) Unwrap() redis.UniversalClient { return c.UniversalClient }
