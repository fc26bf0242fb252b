package storefx_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"

	"github.com/redisfx/redisfx"
	"github.com/redisfx/redisfx/internal/faultproxy"
	"github.com/redisfx/redisfx/internal/obstest"
	"github.com/redisfx/redisfx/internal/redistest"
	"github.com/redisfx/redisfx/storefx"
)

func TestModuleConnectsAndCloses(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	var client redis.UniversalClient
	app := fxtest.New(t,
		storefx.Module,
		fx.Supply(&storefx.Config{URL: srv.URL()}),
		fx.Populate(&client),
	)
	app.RequireStart()
	ctx := context.Background()
	key := redistest.Prefix(t) + "k"
	if err := client.Set(ctx, key, "v", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if got := client.Get(ctx, key).Val(); got != "v" {
		t.Fatalf("GET = %q", got)
	}
	app.RequireStop()
	if err := client.Ping(ctx).Err(); !errors.Is(err, redis.ErrClosed) {
		t.Fatalf("after stop, Ping = %v, want redis.ErrClosed", err)
	}
}

func TestStartFailsFastNamingTheAddress(t *testing.T) {
	t.Parallel()
	srv := redistest.StartPrivate(t)
	addr := srv.Addr()
	srv.Kill()
	app := fx.New(
		storefx.Module,
		fx.Supply(&storefx.Config{URL: "redis://" + addr, ConnectTimeout: 300 * time.Millisecond}),
		fx.Invoke(func(redis.UniversalClient) {}),
		fx.NopLogger,
	)
	began := time.Now()
	err := app.Start(context.Background())
	if err == nil {
		t.Fatal("start succeeded with Redis down")
	}
	if took := time.Since(began); took > 3*time.Second {
		t.Errorf("start took %v to fail, want about ConnectTimeout", took)
	}
	if !strings.Contains(err.Error(), addr) || !strings.Contains(err.Error(), "unreachable") {
		t.Errorf("error does not name the address: %v", err)
	}
	// The cause is the last real error, not the deadline that ended the retries.
	if !strings.HasSuffix(err.Error(), "connect: connection refused") {
		t.Errorf("error does not end with the cause: %v", err)
	}
}

// The start-up PINGs counted as breaker failures: once it opened (after
// 5, about 9 s of dial retries) the error ended with "circuit open", not
// the cause; and a client whose start failed was never closed (Fx runs no
// OnStop for a failed OnStart), so its breaker went on probing. With
// Breaker.Failures 1 the first failed PING would open it.
func TestStartFailure_NamesTheCauseAndLeavesNoClient(t *testing.T) {
	t.Parallel()
	srv := redistest.StartPrivate(t)
	addr := srv.Addr()
	srv.Kill()
	var c *storefx.Client
	app := fx.New(
		storefx.Module,
		fx.Supply(&storefx.Config{URL: "redis://" + addr, ConnectTimeout: 2 * time.Second,
			Breaker: storefx.BreakerConfig{Failures: 1, ProbeInterval: 20 * time.Millisecond}}),
		fx.Populate(&c),
		fx.NopLogger,
	)
	err := app.Start(context.Background())
	if err == nil || !strings.HasSuffix(err.Error(), "connect: connection refused") {
		t.Fatalf("start-up error does not end with the cause: %v", err)
	}
	_ = app.Stop(context.Background())
	probes := c.Breaker().Probes
	time.Sleep(200 * time.Millisecond) // ten probe intervals
	if n := c.Breaker().Probes - probes; n > 0 {
		t.Fatalf("the client of a failed start still probes Redis: %d probes in 200ms", n)
	}
	if err := c.Ping(context.Background()).Err(); !errors.Is(err, redis.ErrClosed) {
		t.Fatalf("the client of a failed start is open: %v", err)
	}
}

func TestInvalidConfigFailsNamingTheField(t *testing.T) {
	t.Parallel()
	app := fx.New(
		storefx.Module,
		fx.Supply(&storefx.Config{Port: -3}),
		fx.Invoke(func(redis.UniversalClient) {}),
		fx.NopLogger,
	)
	if err := app.Err(); err == nil || !strings.Contains(err.Error(), "Config.Port") {
		t.Fatalf("err = %v, want one naming Config.Port", err)
	}
}

func TestNamedClientCoexistsWithDefault(t *testing.T) {
	t.Parallel()
	main, cache := redistest.Start(t), redistest.StartPrivate(t)
	type clients struct {
		fx.In
		Default redis.UniversalClient
		Cache   redis.UniversalClient `name:"cache"`
		Reg     *storefx.Registry
	}
	var got clients
	app := fxtest.New(t,
		storefx.Module,
		fx.Supply(&storefx.Config{URL: main.URL()}),
		storefx.NamedClient("cache", storefx.Config{URL: cache.URL()}),
		fx.Populate(&got),
	)
	app.RequireStart()
	defer app.RequireStop()
	ctx := context.Background()
	key := redistest.Prefix(t) + "where"
	got.Cache.Set(ctx, key, "cache", time.Minute)
	if n := got.Default.Exists(ctx, key).Val(); n != 0 && main.Addr() != cache.Addr() {
		t.Fatalf("the cache client wrote to the default server")
	}
	if v := cache.Client().Get(ctx, key).Val(); v != "cache" {
		t.Fatalf("cache server has %q", v)
	}
	if names := strings.Join(got.Reg.Names(), ","); names != "cache,default" {
		t.Fatalf("registry names = %s", names)
	}
}

func TestInstrumentationSeesClientName(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	seen := make(chan string, 4)
	app := fxtest.New(t,
		storefx.Module,
		fx.Supply(&storefx.Config{URL: srv.URL()}),
		storefx.NamedClient("cache", storefx.Config{URL: srv.URL()}),
		fx.Provide(storefx.AsInstrumentation(func() storefx.Instrumentation {
			return func(ci storefx.ClientInfo) redis.Hook { seen <- ci.Name; return nil }
		})),
		fx.Invoke(func(redis.UniversalClient) {}),
		fx.Invoke(fx.Annotate(func(redis.UniversalClient) {}, fx.ParamTags(`name:"cache"`))),
	)
	app.RequireStart()
	app.RequireStop()
	close(seen)
	var names []string
	for n := range seen {
		names = append(names, n)
	}
	if len(names) != 2 {
		t.Fatalf("instrumentation called for %v, want both clients", names)
	}
}

// The handshake must stay quiet: no CLIENT SETINFO / MAINT_NOTIFICATIONS.
func TestHandshakeSendsNoIdentityOrMaintenanceCommands(t *testing.T) {
	t.Parallel()
	srv := redistest.StartPrivate(t)
	c, err := storefx.New("default", storefx.Config{URL: srv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	stats := srv.Client().Info(ctx, "commandstats").Val()
	for _, cmd := range []string{"cmdstat_client|setinfo", "cmdstat_client|maint_notifications"} {
		if strings.Contains(stats, cmd) {
			t.Errorf("handshake sent %s:\n%s", cmd, stats)
		}
	}
}

func TestClusterClientAgainstThreeMasters(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster start takes a few seconds")
	}
	t.Parallel()
	cl := redistest.StartCluster(t, 3, 0)
	var client redis.UniversalClient
	app := fxtest.New(t,
		storefx.Module,
		fx.Supply(&storefx.Config{Addrs: cl.Addrs()}),
		fx.Populate(&client),
	)
	app.RequireStart()
	defer app.RequireStop()
	if _, ok := client.(*redis.ClusterClient); !ok {
		t.Fatalf("client is %T, want *redis.ClusterClient", client)
	}
	ctx := context.Background()
	p := redistest.Prefix(t)
	for i := 0; i < 50; i++ { // keys spread over all slots and masters
		k := p + string(rune('a'+i%26)) + time.Duration(i).String()
		if err := client.Set(ctx, k, i, time.Minute).Err(); err != nil {
			t.Fatalf("SET %s: %v", k, err)
		}
	}
	var masters atomic.Int32 // ForEachMaster runs the callbacks concurrently
	_ = client.(*redis.ClusterClient).ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		if m.DBSize(ctx).Val() > 0 {
			masters.Add(1)
		}
		return nil
	})
	if masters := masters.Load(); masters != 3 {
		t.Fatalf("keys landed on %d masters, want 3", masters)
	}
}

// A Cluster master without replica killed for good: every write failed
// (CLUSTERDOWN), yet the health check's PING landed on a live node, so
// store_up stayed 1 and /readyz ready. Every master is PINGed now, and
// cluster_state must be ok.
func TestClusterHealth_DeadMasterIsDown(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster start takes a few seconds")
	}
	t.Parallel()
	cl := redistest.StartCluster(t, 3, 0)
	c, err := storefx.New("default", storefx.Config{Addrs: cl.Addrs(), DialTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	reg := storefx.NewRegistry()
	if err := reg.Add(c); err != nil {
		t.Fatal(err)
	}
	// A timeout a loaded machine meets (the first check dials every
	// node): a down seen before the kill would let the test pass for
	// the wrong reason. A refused dial to the killed node fails at once.
	stop, err := reg.Watch("default", 50*time.Millisecond, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	for deadline := time.Now().Add(10 * time.Second); !reg.Health("default").Up; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not up before the fault: %v", reg.Health("default").Err)
		}
	}
	cl.Nodes[0].Kill()
	deadline := time.Now().Add(10 * time.Second)
	for reg.Health("default").Up {
		if time.Now().After(deadline) {
			t.Fatal("a dead master (no replica) is still reported up after 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := reg.Ready(context.Background()); err == nil {
		t.Fatal("Ready passes with a dead master")
	}
}

func TestAvailabilityGauge(t *testing.T) {
	t.Parallel()
	srv := redistest.StartPrivate(t)
	reg := prometheus.NewRegistry()
	app := fxtest.New(t, storefx.Module,
		fx.Supply(&storefx.Config{URL: srv.URL()}),
		fx.Provide(func() prometheus.Registerer { return reg }),
		fx.Invoke(func(redis.UniversalClient) {}))
	app.RequireStart()
	defer app.RequireStop()
	up := func() float64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == storefx.AvailabilityMetric {
				return mf.Metric[0].GetGauge().GetValue()
			}
		}
		t.Fatal("store_up not exported")
		return -1
	}
	if v := up(); v != 1 {
		t.Fatalf("store_up = %v with Redis up", v)
	}
	srv.Kill()
	deadline := time.Now().Add(storefx.DefaultHealthCheckInterval + storefx.DefaultHealthCheckTimeout + time.Second)
	for up() != 0 { // the next background check finds the server gone
		if time.Now().After(deadline) {
			t.Fatal("store_up still 1 with Redis down")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestStartFailsNamingAServerThatDoesNotAnswer(t *testing.T) {
	t.Parallel()
	srv := redistest.StartPrivate(t)
	proxy := faultproxy.Start(t, srv.Addr())
	proxy.SetMode(faultproxy.Freeze)
	app := fx.New(
		storefx.Module,
		fx.Supply(&storefx.Config{URL: "redis://" + proxy.Addr(), ConnectTimeout: 300 * time.Millisecond}),
		fx.Invoke(func(redis.UniversalClient) {}),
		fx.NopLogger,
	)
	err := app.Start(context.Background())
	if err == nil || !strings.HasSuffix(err.Error(), "the server accepts connections but did not answer PING in time (overloaded, paused, or not Redis?)") {
		t.Fatalf("start error %v, want the cause named", err)
	}
	proxy.SetMode(faultproxy.Forward)
}

// The configuration may be supplied by value or by pointer; never ignored.
func TestConfigByValueOrPointer(t *testing.T) {
	t.Parallel()
	srv := redistest.StartPrivate(t)
	ctx := context.Background()
	if err := srv.Client().Set(ctx, "which", "private", 0).Err(); err != nil {
		t.Fatal(err)
	}
	var client redis.UniversalClient
	app := fxtest.New(t, storefx.Module, fx.Supply(storefx.Config{URL: srv.URL()}), fx.Populate(&client), fx.NopLogger)
	app.RequireStart()
	if got := client.Get(ctx, "which").Val(); got != "private" {
		t.Fatalf("a Config supplied by value was ignored: GET which = %q", got)
	}
	app.RequireStop()

	err := fx.New(storefx.Module, fx.Supply(storefx.Config{URL: srv.URL()}, &storefx.Config{URL: srv.URL()}),
		fx.Invoke(func(redis.UniversalClient) {}), fx.NopLogger).Err()
	if err == nil || !strings.Contains(err.Error(), "storefx: both a storefx.Config and a *storefx.Config are in the Fx graph: supply one of them") {
		t.Fatalf("both forms: %v", err)
	}
}

// Config.Host holding the host:port of a running Redis passed fx.New; the
// client dialled "[127.0.0.1:port]:6379" and start-up failed after
// ConnectTimeout with "no such host". It fails fx.New now, with a
// *redisfx.ConfigError naming the field.
func TestConfigThatCannotWorkFailsFxNewNamingTheField(t *testing.T) {
	t.Parallel()
	srv := redistest.StartPrivate(t)
	app := fx.New(storefx.Module, fx.Supply(storefx.Config{Host: srv.Addr()}), fx.Invoke(func(redis.UniversalClient) {}), fx.NopLogger)
	var cfgErr *redisfx.ConfigError
	if err := app.Err(); !errors.As(err, &cfgErr) || cfgErr.Field != "Config.Host" {
		t.Errorf("fx.New error %v, want a *redisfx.ConfigError naming Config.Host", err)
	}
}

// After a Cluster failover every key was served and store_up read 1, yet the
// dead master's breaker stayed open, and with it the client's state and
// store_breaker_state, until go-redis let the node go a minute later (and it
// was probed every ProbeInterval meanwhile). The health check closes the
// breakers of nodes that no longer serve a slot.
func TestClusterFailover_BreakerOfTheNodeThatLeftStopsCounting(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 6-node cluster and kills a master")
	}
	t.Parallel()
	cl := redistest.StartCluster(t, 3, 1)
	reg := prometheus.NewRegistry()
	var c *storefx.Client
	app := fxtest.New(t, storefx.Module,
		fx.Provide(func() prometheus.Registerer { return reg }),
		fx.Supply(storefx.Config{Addrs: cl.Addrs(), DialTimeout: 200 * time.Millisecond}),
		fx.Populate(&c))
	app.RequireStart()
	defer app.RequireStop()
	cc := c.Unwrap().(*redis.ClusterClient)
	ctx := context.Background()
	victim := cl.Nodes[0].Addr()
	var key string
	for i := 0; key == "" && i < 10000; i++ {
		k := redistest.Prefix(t) + strconv.Itoa(i)
		if m, err := cc.MasterForKey(ctx, k); err == nil && m.Options().Addr == victim {
			key = k
		}
	}
	if key == "" {
		t.Fatalf("no key of %s", victim)
	}
	cl.Nodes[0].Kill()
	for i := 0; c.Breaker().Opened == 0; i++ {
		if i > 100 {
			t.Fatalf("breaker never opened: %+v", c.Breaker())
		}
		_ = get(c, key, 300*time.Millisecond)
	}
	// The replica takes over; the key is served again (empty or not).
	deadline := time.Now().Add(30 * time.Second)
	for err := get(c, key, 300*time.Millisecond); err != nil && !errors.Is(err, redis.Nil); err = get(c, key, 300*time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the key was never served again: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Within a few health checks (1 s each) the client reads closed, well
	// before go-redis lets the node go (a minute).
	served := time.Now()
	for st := c.Breaker(); st.State != storefx.BreakerClosed; st = c.Breaker() {
		if time.Since(served) > 15*time.Second {
			t.Fatalf("%v after the failover the client's breaker reads %+v, with every key served", time.Since(served).Round(time.Second), st)
		}
		time.Sleep(50 * time.Millisecond)
	}
	probes := c.Breaker().Probes
	if v := obstest.Value(t, reg, "store_breaker_state", "client", "default"); v != 0 {
		t.Fatalf("store_breaker_state %v with the client's breaker closed", v)
	}
	// The dead address is no longer probed.
	time.Sleep(time.Second) // four ProbeIntervals: what is being shown is that nothing happens
	if st := c.Breaker(); st.Probes != probes {
		t.Fatalf("the node that left is still probed: %d probes, then %d", probes, st.Probes)
	}
}

// An app of storefx.Module and a module that asks only for the Registry
// (httpfx's /readyz does) never built the client: with Redis down the app
// started, and /readyz, reading an empty registry, said ready (found by an
// adversary). The default client and every NamedClient are built with the
// app, so start-up fails naming the address.
func TestModule_NothingAsksForTheClient_StillPingedAtStart(t *testing.T) {
	t.Parallel()
	for _, named := range []bool{false, true} {
		var reg *storefx.Registry
		cfg := storefx.Config{URL: "redis://127.0.0.1:1", ConnectTimeout: 200 * time.Millisecond}
		opts := []fx.Option{fx.NopLogger, storefx.Module, fx.Populate(&reg)}
		if named {
			up := redistest.Start(t)
			opts = append(opts, fx.Supply(storefx.Config{URL: up.URL()}), storefx.NamedClient("down", cfg))
		} else {
			opts = append(opts, fx.Supply(cfg))
		}
		app := fx.New(opts...)
		err := app.Start(context.Background())
		if err == nil {
			_ = app.Stop(context.Background())
			t.Fatalf("named %v: started with Redis at 127.0.0.1:1 refusing, registry %v", named, reg.Names())
		}
		if !strings.Contains(err.Error(), "127.0.0.1:1") {
			t.Fatalf("named %v: %v, want the address named", named, err)
		}
	}
}

// The stop hook does not wait for Redis: a health check and a breaker probe
// in flight to a Redis that swallows everything fail at once when the
// client closes. Before, the hook cancelled the health check's context
// (which does not cut a PING short) and waited for the probe: with Redis
// out of reach it took up to HealthCheckTimeout and ProbeTimeout, past a
// short stop deadline (found in CI, where an idempotencyfx stop test's
// 1 s deadline ran out).
func TestModule_StopDoesNotWaitForAHangingRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.StartPrivate(t)
	proxy := faultproxy.Start(t, srv.Addr())
	var c *storefx.Client
	app := fx.New(fx.NopLogger, storefx.Module,
		fx.Supply(&storefx.Config{URL: "redis://" + proxy.Addr(), HealthCheckInterval: 50 * time.Millisecond, HealthCheckTimeout: 5 * time.Second,
			Breaker: storefx.BreakerConfig{Failures: 1, ProbeTimeout: 3 * time.Second}}),
		fx.Populate(&c))
	if err := app.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	proxy.SetMode(faultproxy.Blackhole)
	// Waiting ProbeTimeout, the GET counts as a failure.
	if err := get(c, "k", 3100*time.Millisecond); err == nil {
		t.Fatal("GET through a black hole succeeded")
	}
	waitState(t, c, storefx.BreakerHalfOpen, time.Second) // its probe is in flight, for 3 s
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	began := time.Now()
	if err := app.Stop(ctx); err != nil {
		t.Fatalf("Stop with Redis hanging: %v after %v", err, time.Since(began))
	}
}
