package redistest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// StartSentinel runs a redis-server in Sentinel mode watching master as
// "mymaster", with extra lines of configuration (e.g. "requirepass x",
// "sentinel auth-pass mymaster y"), and returns its address once it
// accepts connections (it names its master from its configuration at
// once). It is killed when t ends.
func StartSentinel(t testing.TB, master string, conf ...string) string {
	t.Helper()
	port := freePort(t)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	host, mport, err := net.SplitHostPort(master)
	if err != nil {
		t.Fatalf("redistest: master address %q: %v", master, err)
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "sentinel.conf") // Sentinel insists on a writable config file
	body := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\nsentinel monitor mymaster %s %s 1\n%s\n",
		port, dir, host, mport, strings.Join(conf, "\n"))
	if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("redis-server", file, "--sentinel")
	if err := cmd.Start(); err != nil {
		t.Fatalf("redistest: redis-server --sentinel: %v", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		if conn, err := net.DialTimeout("tcp", addr, 100*time.Millisecond); err == nil {
			_ = conn.Close()
			return addr
		}
		select {
		case <-done:
			t.Fatal("redistest: redis-server --sentinel exited")
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("redistest: the sentinel did not listen within 10s")
		}
		time.Sleep(10 * time.Millisecond) // polling: a sentinel has no readiness signal
	}
}
