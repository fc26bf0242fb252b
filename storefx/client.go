package storefx

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/fx"
	"go.uber.org/zap"

	"github.com/redisfx/redisfx/internal/backoff"
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

// Instrumentation builds a go-redis hook for a client (nil: none). Every
// client storefx builds gets one from each Instrumentation in
// InstrumentationGroup; on a Cluster, one per node (ClientInfo.Node).
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

// New builds a client from cfg without Fx. It does not connect: use the
// client's own Ping to check the server.
func New(name string, cfg Config, inst ...Instrumentation) (*Client, error) {
	o, err := cfg.options()
	if err != nil {
		return nil, err
	}
	c := &Client{Details: ClientInfo{Name: name, Network: "tcp"}, breakers: newBreakerSet(cfg.Breaker)}
	var rc *redis.Client
	switch {
	case o.cluster != nil:
		c.Details.Addrs, c.Details.Cluster = o.cluster.Addrs, true
		c.setup = setupFieldsOf(cfg, o.cluster.Password, 0)
		cc := redis.NewClusterClient(o.cluster)
		if c.breakers != nil { // tells a retry of a sent command from one never sent
			cc.AddHook(callHook{})
		}
		// Nodes open lazily, each with its own breaker (a dead master must
		// not stop the others) and its own hooks.
		info := c.Details
		cc.OnNewNode(func(node *redis.Client) {
			info := info
			info.Node = node.Options().Addr
			c.breakers.add(node)
			addHooks(node, info, inst)
		})
		c.UniversalClient = cc
		return c, nil
	case o.failover != nil:
		c.Details.Addrs, c.Details.DB = o.failover.SentinelAddrs, o.failover.DB
		c.setup = setupFieldsOf(cfg, o.failover.Password, o.failover.DB)
		rc = redis.NewFailoverClient(o.failover)
	default:
		s := o.simple
		c.Details.Addrs, c.Details.Node, c.Details.DB = []string{s.Addr}, s.Addr, s.DB
		c.Details.Network = cmp.Or(s.Network, "tcp")
		c.setup = setupFieldsOf(cfg, s.Password, s.DB)
		rc = redis.NewClient(s)
	}
	c.UniversalClient = rc
	c.breakers.add(rc)
	addHooks(rc, c.Details, inst)
	return c, nil
}

func addHooks(c redis.UniversalClient, info ClientInfo, inst []Instrumentation) {
	for _, f := range inst {
		if h := f(info); h != nil {
			c.AddHook(h)
		}
	}
}

// Registry knows every client of an application by name, and the result
// of each one's background health check (Watch).
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
	return slices.Sorted(maps.Keys(r.clients))
}

// connect pings the client until it answers, with backoff, for at most
// timeout; the error names the address. A refusal retrying cannot change
// fails at once; LOADING, BUSY and the like are retried ("not ready").
func connect(ctx context.Context, c *Client, timeout time.Duration) error {
	// The start-up PINGs make no span and pass the breaker uncounted: open,
	// its refusal would hide the real cause.
	ctx, cancel := context.WithTimeout(BypassBreaker(plugintrace.WithoutCommandSpans(ctx)), timeout)
	defer cancel()
	b := backoff.Backoff{Min: 25 * time.Millisecond, Max: 500 * time.Millisecond}
	var cause error   // the last error that was not our own deadline
	answered := false // cause is an answer of Redis: reachable, not ready
	for attempts := 1; ; attempts++ {
		err := c.Ping(ctx).Err()
		if err == nil {
			return nil
		}
		ans, refusal := c.setup.classify(err)
		if refusal != nil {
			return fmt.Errorf("storefx: client %q: Redis at %v answered and refused the connection: %w",
				c.Details.Name, c.Details.Addrs, refusal)
		}
		if cause == nil || !errors.Is(err, ctx.Err()) {
			cause, answered = err, ans
		}
		if b.Wait(ctx) {
			continue
		}
		state := "is unreachable"
		if answered {
			state = "answered but was not ready"
		}
		if errors.Is(cause, ctx.Err()) {
			// go-redis retried dialing until our deadline: find out why.
			cause = diagnose(c.Details)
		}
		return fmt.Errorf("storefx: client %q: Redis at %v %s (%d attempts in %v): %w",
			c.Details.Name, c.Details.Addrs, state, attempts, timeout, cause)
	}
}

// diagnose dials the first address of a client that did not answer, to name
// the cause of a failed start: "connection refused", "no such host", or a
// server that accepts connections but does not answer in time.
func diagnose(info ClientInfo) error {
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

// RouteRedisLogs sends go-redis's own log lines (a failed dial, a pool
// problem) to the app's *zap.Logger, named "go-redis", at warn level. It is
// not part of Module: go-redis's logger is process-wide, and it is not
// undone at stop.
//
//	fx.New(storefx.Module, storefx.RouteRedisLogs, …)
var RouteRedisLogs = fx.Invoke(func(log *zap.Logger) { redis.SetLogger(RedisLogger{Log: log.Named("go-redis")}) })

// RedisLogger adapts a *zap.Logger to go-redis's logger interface; pass it
// to redis.SetLogger to route go-redis's log lines without Fx.
type RedisLogger struct {
	Log *zap.Logger
}

// Printf logs one go-redis line at warn level: go-redis logs only failures.
func (l RedisLogger) Printf(_ context.Context, format string, v ...any) {
	l.Log.Warn(strings.TrimSpace(fmt.Sprintf(format, v...)))
}
