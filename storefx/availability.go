package storefx

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/redisfx/redisfx/plugintrace"
)

// AvailabilityMetric is the name (before the app's prefix) of the store
// availability gauge that the StoreConnectionLost alert reads: 1 when the
// client's Redis answered its last health check, 0 when it did not.
const AvailabilityMetric = "store_up"

// BreakerMetric is the name (before the app's prefix) of the gauge of each
// client's circuit breaker: 0 closed, 1 open, 2 half-open (a probe in
// flight). BreakerOpenedMetric counts the times it opened.
const (
	BreakerMetric       = "store_breaker_state"
	BreakerOpenedMetric = "store_breaker_opened_total"
)

// Defaults of Config.HealthCheckInterval and Config.HealthCheckTimeout.
const (
	DefaultHealthCheckInterval = time.Second
	DefaultHealthCheckTimeout  = 500 * time.Millisecond
)

// Health is what the background health check last learned of a client's
// server. /readyz and store_up read it; neither talks to Redis, so both
// answer at once whatever Redis does (down, frozen, paused).
type Health struct {
	// Up: the last check got PONG, and it is recent (no older than the
	// check interval plus its timeout).
	Up bool
	// Checked is when the last check ended; zero before the first.
	Checked time.Time
	// Err says why the client is not up.
	Err error
	// Breaker is the state of the client's circuit breaker now.
	Breaker BreakerState
}

var (
	errNotWatched = errors.New("no health check runs for this client (it is not started)")
	errStale      = errors.New("the health check has not finished in time (the check itself is stuck)")
)

// probe checks one client's server in the background: PING every interval,
// each bounded by timeout, one at a time.
type probe struct {
	client            *Client
	interval, timeout time.Duration
	last              atomic.Pointer[Health]
}

func (p *probe) check(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	err := healthCheck(ctx, p.client)
	p.last.Store(&Health{Up: err == nil, Checked: time.Now(), Err: err})
}

// healthCheck PINGs the client. A Cluster client PINGs every master and
// asks one node for cluster_state: a PING lands on one node, which answers
// PONG while a master without replica is dead and every write of its slots
// (with cluster-require-full-coverage, every write) fails.
func healthCheck(ctx context.Context, c *Client) error {
	cc, ok := c.UniversalClient.(*redis.ClusterClient)
	if !ok {
		return c.Ping(ctx).Err()
	}
	c.breakers.forgetLeftNodes(ctx, cc)
	if err := cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		if err := m.Ping(ctx).Err(); err != nil {
			return fmt.Errorf("master %s: %w", m.Options().Addr, err)
		}
		return nil
	}); err != nil {
		return err
	}
	info, err := cc.ClusterInfo(ctx).Result()
	if err != nil {
		return err
	}
	if !strings.Contains(info, "cluster_state:ok") {
		return errors.New("cluster_state is not ok: a slot range has no reachable master")
	}
	return nil
}

func (p *probe) run(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	tick := time.NewTicker(p.interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			p.check(ctx)
		}
	}
}

// health is the last check's result; an "up" older than the interval plus
// the timeout (a stuck check) is not up. (Compared without adding them,
// which may overflow.)
func (p *probe) health(now time.Time) Health {
	h := *p.last.Load()
	if h.Up && now.Sub(h.Checked)-p.interval > p.timeout {
		h.Up, h.Err = false, errStale
	}
	return h
}

// Watch starts the background health check of the registered client name:
// a first PING now, then one every interval, each bounded by timeout. The
// returned stop ends it and waits for it. Module watches every client it
// starts, with Config.HealthCheckInterval and Config.HealthCheckTimeout.
func (r *Registry) Watch(name string, interval, timeout time.Duration) (stop func(), err error) {
	if interval <= 0 || timeout <= 0 {
		return nil, fmt.Errorf("storefx: health check of %q: interval %v and timeout %v must be positive", name, interval, timeout)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.clients[name]
	if c == nil {
		return nil, fmt.Errorf("storefx: no client named %q", name)
	}
	if r.probes[name] != nil {
		return nil, fmt.Errorf("storefx: client %q is already watched", name)
	}
	// Its PINGs make no command span and pass the breaker (an answer closes it).
	ctx, cancel := context.WithCancel(BypassBreaker(plugintrace.WithoutCommandSpans(context.Background())))
	p, done := &probe{client: c, interval: interval, timeout: timeout}, make(chan struct{})
	p.check(ctx)
	r.probes[name] = p
	go p.run(ctx, done)
	return func() {
		cancel()
		<-done
		r.mu.Lock()
		if r.probes[name] == p {
			delete(r.probes, name)
		}
		r.mu.Unlock()
	}, nil
}

// Health returns what the last health check of client name found, without
// talking to Redis. A client that is not watched is not up.
func (r *Registry) Health(name string) Health {
	r.mu.RLock()
	p := r.probes[name]
	r.mu.RUnlock()
	if p == nil {
		return Health{Err: errNotWatched}
	}
	h := p.health(time.Now())
	h.Breaker = p.client.Breaker().State
	return h
}

// Ready reports whether every registered client was up at its last health
// check, else names the first that was not, its address and the cause. It
// is /readyz's check: it does not talk to Redis (ctx is unused).
func (r *Registry) Ready(context.Context) error {
	for _, n := range r.Names() {
		if h := r.Health(n); !h.Up {
			return fmt.Errorf("storefx: client %q at %v: %w", n, r.Client(n).Details.Addrs, h.Err)
		}
	}
	return nil
}

type availability struct {
	reg                    *Registry
	desc, state, openCount *prometheus.Desc
}

// NewAvailabilityCollector returns the store_up{client} collector of reg
// (and the breaker gauges). It reads the cached result of Watch and never
// talks to Redis.
func NewAvailabilityCollector(reg *Registry) prometheus.Collector {
	return &availability{reg: reg, desc: prometheus.NewDesc(AvailabilityMetric,
		"1 when the named Redis client's server answered its last background health check (PING every Config.HealthCheckInterval), else 0.",
		[]string{"client"}, nil),
		state: prometheus.NewDesc(BreakerMetric,
			"The named Redis client's circuit breaker: 0 closed, 1 open (commands fail at once with ErrCircuitOpen), 2 half-open (a probe in flight).",
			[]string{"client"}, nil),
		openCount: prometheus.NewDesc(BreakerOpenedMetric,
			"Times the named Redis client's circuit breaker opened after consecutive failed commands.",
			[]string{"client"}, nil)}
}

// Describe implements prometheus.Collector.
func (a *availability) Describe(ch chan<- *prometheus.Desc) {
	ch <- a.desc
	ch <- a.state
	ch <- a.openCount
}

// Collect implements prometheus.Collector.
func (a *availability) Collect(ch chan<- prometheus.Metric) {
	for _, name := range a.reg.Names() {
		up := 0.0
		if a.reg.Health(name).Up {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(a.desc, prometheus.GaugeValue, up, name)
		if c := a.reg.Client(name); c != nil && c.breakers != nil {
			st := c.breakers.stats()
			ch <- prometheus.MustNewConstMetric(a.state, prometheus.GaugeValue, float64(st.State), name)
			ch <- prometheus.MustNewConstMetric(a.openCount, prometheus.CounterValue, float64(st.Opened), name)
		}
	}
}
