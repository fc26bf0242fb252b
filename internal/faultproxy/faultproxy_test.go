package faultproxy_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/redisfx/redisfx/internal/faultproxy"
	"github.com/redisfx/redisfx/internal/redistest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// client waits long for an answer that should come (a loaded machine may be
// slow to give it); pingFails gives one that should not come 200 ms.
func client(t *testing.T, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ReadTimeout: 10 * time.Second,
		WriteTimeout: 10 * time.Second, PoolSize: 1, DisableIdentity: true, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func pingFails(c *redis.Client) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	return c.Ping(ctx).Err() != nil
}

func TestModes(t *testing.T) {
	srv := redistest.StartPrivate(t)
	p := faultproxy.Start(t, srv.Addr())
	c := client(t, p.Addr())
	ctx := context.Background()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("forward: %v", err)
	}

	p.SetMode(faultproxy.Freeze)
	if !pingFails(c) {
		t.Fatal("a frozen connection answered")
	}
	p.SetMode(faultproxy.Forward)
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("after thaw: %v", err)
	}

	p.SetMode(faultproxy.Blackhole)
	if !pingFails(c) {
		t.Fatal("a blackholed connection answered")
	}
	p.SetMode(faultproxy.Forward)

	p.Refuse(true)
	p.CutAll()
	if !pingFails(c) {
		t.Fatal("a refused dial succeeded")
	}
	p.Refuse(false)
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("after refuse(false): %v", err)
	}
}

func TestFreezeHoldsBytesUntilThaw(t *testing.T) {
	srv := redistest.StartPrivate(t)
	p := faultproxy.Start(t, srv.Addr())
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1, DisableIdentity: true, PoolSize: 1})
	defer c.Close()
	ctx := context.Background()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	p.SetMode(faultproxy.Freeze)
	done := make(chan error, 1)
	go func() { done <- c.Set(ctx, "k", "v", 0).Err() }()
	select {
	case err := <-done:
		t.Fatalf("a frozen connection answered: %v", err)
	case <-time.After(100 * time.Millisecond): // the duration under test: nothing passes while frozen
	}
	p.SetMode(faultproxy.Forward)
	if err := <-done; err != nil {
		t.Fatalf("after thaw: %v", err)
	}
	if v := srv.Client().Get(ctx, "k").Val(); v != "v" {
		t.Fatalf("the held write was lost: %q", v)
	}
}

func TestSubscribersAndPerConnectionModes(t *testing.T) {
	srv := redistest.StartPrivate(t)
	p := faultproxy.Start(t, srv.Addr())
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), DisableIdentity: true})
	defer c.Close()
	ctx := context.Background()
	ps := c.Subscribe(ctx, "ch")
	defer ps.Close()
	if _, err := ps.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	subs := p.Subscribers()
	if len(subs) != 1 || len(p.Conns()) != 2 {
		t.Fatalf("subscribers %d of %d connections, want 1 of 2", len(subs), len(p.Conns()))
	}
	subs[0].SetMode(faultproxy.Blackhole)
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("the command connection was hit: %v", err)
	}
	if err := srv.Client().Publish(ctx, "ch", "x").Err(); err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if m, err := ps.ReceiveMessage(rctx); err == nil {
		t.Fatalf("a blackholed subscriber got %v", m)
	}
}

// A lost connection stays silent when the proxy is set to Forward: bytes
// lost, then delivered again, is no failure TCP has.
func TestLose_OutlivesSetModeForward(t *testing.T) {
	srv := redistest.Start(t)
	p := faultproxy.Start(t, srv.Addr())
	c := client(t, p.Addr())
	if err := c.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	conns := p.Conns()
	if len(conns) != 1 {
		t.Fatalf("%d connections, want 1", len(conns))
	}
	conns[0].Lose()
	p.SetMode(faultproxy.Freeze)
	p.SetMode(faultproxy.Forward)
	sent := p.Sent()
	if !pingFails(c) {
		t.Fatal("a lost connection answered after SetMode(Forward)")
	}
	if p.Sent() != sent {
		t.Fatal("a lost connection passed bytes on")
	}
}
