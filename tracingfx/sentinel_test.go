package tracingfx

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisfx/redisfx/internal/redistest"
	"github.com/redisfx/redisfx/storefx"
)

// startSentinel runs a redis-server in Sentinel mode watching master as
// "mymaster", and returns its address once it names the master.
func startSentinel(t *testing.T, master string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_, port, _ := net.SplitHostPort(addr)
	_ = ln.Close()
	host, mport, _ := net.SplitHostPort(master)
	dir := t.TempDir()
	conf := filepath.Join(dir, "sentinel.conf") // Sentinel insists on a writable config file
	body := fmt.Sprintf("port %s\nbind 127.0.0.1\ndir %s\nsentinel monitor mymaster %s %s 1\n", port, dir, host, mport)
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("redis-server", conf, "--sentinel")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	sc := redis.NewSentinelClient(&redis.Options{Addr: addr})
	defer sc.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if got, err := sc.GetMasterAddrByName(context.Background(), "mymaster").Result(); err == nil && len(got) == 2 {
			return addr
		}
		select {
		case <-done:
			t.Fatal("redis-server --sentinel exited")
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the sentinel did not name its master within 10s")
		}
		time.Sleep(10 * time.Millisecond) // polling the sentinel, which has no readiness signal
	}
}

// A Sentinel client's spans name the master the commands went to, not the
// Sentinel it asked.
func TestCommandSpans_SentinelSpansNameTheMaster(t *testing.T) {
	t.Parallel()
	master := redistest.StartPrivate(t)
	sentinel := startSentinel(t, master.Addr())
	m := newMemory(t)
	c, err := storefx.New("default", storefx.Config{Addrs: []string{sentinel}, MasterName: "mymaster"}, Instrumentation(m, SpanConfig{}, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	a := attrsOf(m.one(t, "redis.PING"))
	if a["server.address"].AsString() != "127.0.0.1" || a["server.port"].AsInt64() != portOf(t, master.Addr()) {
		t.Fatalf("span names %s:%d; the master is %s, the sentinel %s", a["server.address"].AsString(), a["server.port"].AsInt64(), master.Addr(), sentinel)
	}
}
