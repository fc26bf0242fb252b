package storefx

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
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
}

// Instrumentation builds a go-redis hook for a client. Modules such as
// tracingfx contribute one to the value group "redisfx.store.instrumentation"
// (see AsInstrumentation); every client that storefx builds gets a hook from
// each. A nil hook is skipped.
type Instrumentation func(ClientInfo) redis.Hook

// AsInstrumentation annotates a constructor of an Instrumentation so that its
// result joins the group that storefx applies to every client.
func AsInstrumentation(constructor any) any {
	return fxAnnotateInstrumentation(constructor)
}

// Client is a Redis client together with its name.
type Client struct {
	redis.UniversalClient
	Details ClientInfo
}

// New builds a client from cfg without Fx. It does not connect: use
// (*Registry).Ping or the client's own Ping to check the server.
func New(name string, cfg Config, inst ...Instrumentation) (*Client, error) {
	opts, err := cfg.options()
	if err != nil {
		return nil, err
	}
	info := ClientInfo{Name: name, Addrs: append([]string(nil), opts.Addrs...), Network: "tcp"}
	if opts.Dialer != nil {
		info.Network = "unix"
	}
	var c redis.UniversalClient
	if opts.MasterName == "" && (len(opts.Addrs) > 1 || opts.IsClusterMode) {
		// As NewUniversalClient would, but with a slot map that follows a
		// failover within seconds instead of a minute.
		co := opts.Cluster()
		co.ClusterStateReloadInterval = cfg.ClusterStateReloadInterval
		if co.ClusterStateReloadInterval == 0 {
			co.ClusterStateReloadInterval = 2 * time.Second
		}
		c = redis.NewClusterClient(co)
	} else {
		c = redis.NewUniversalClient(opts)
	}
	for _, f := range inst {
		if f == nil {
			continue
		}
		if h := f(info); h != nil {
			c.AddHook(h)
		}
	}
	return &Client{UniversalClient: c, Details: info}, nil
}

// Registry knows every client that storefx built in an application, by name.
// The HTTP layer's /readyz pings them through it.
type Registry struct {
	mu      sync.RWMutex
	clients map[string]*Client
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{clients: map[string]*Client{}} }

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

// Ping checks every registered client once and returns the first failure,
// naming the client and its address. It is the readiness check of /readyz.
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
func connect(ctx context.Context, c *Client, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	backoff := 25 * time.Millisecond
	attempts := 0
	for {
		attempts++
		err := c.Ping(ctx).Err()
		if err == nil {
			return nil
		}
		wait := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			wait.Stop()
			return fmt.Errorf("storefx: client %q: Redis at %v is unreachable (%d attempts in %v): %w",
				c.Details.Name, c.Details.Addrs, attempts, timeout, err)
		case <-wait.C:
		}
		if backoff < 500*time.Millisecond {
			backoff *= 2
		}
	}
}

// Unwrap returns the go-redis client itself (*redis.Client,
// *redis.ClusterClient …), for code that needs its concrete type.
func (c *Client) Unwrap() redis.UniversalClient { return c.UniversalClient }
