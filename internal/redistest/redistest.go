// Package redistest starts private, disposable redis-server processes for
// tests: one per call, on a free loopback port, killed and reaped at cleanup.
//
// Setting REDIS_ADDR makes Start return that existing server instead; tests
// then isolate themselves with Prefix and must not use the fault helpers
// (they skip). Nothing here ever runs FLUSHALL on a server it did not start.
package redistest

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// Server is a Redis server for one test.
type Server struct {
	t       testing.TB
	addr    string
	port    int
	dir     string
	args    []string
	private bool

	mu   sync.Mutex
	proc *process
}

// process is one redis-server process and the signal of its exit.
type process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has been reaped
	err  error
}

func (p *process) kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// Option adjusts the redis-server command line of a private server.
type Option func(*[]string)

// WithArgs adds redis-server arguments, e.g. WithArgs("--requirepass", "s3cret").
// "{port}" in an argument is replaced by the server's port, so
// WithArgs("--port", "0", "--tls-port", "{port}", …) makes a TLS-only server.
func WithArgs(args ...string) Option {
	return func(a *[]string) { *a = append(*a, args...) }
}

// Start returns a running server for t: REDIS_ADDR if set, else a private
// redis-server that is killed when t ends.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	if addr := os.Getenv("REDIS_ADDR"); addr != "" && addr != examplesAddr && len(opts) == 0 {
		s := &Server{t: t, addr: addr}
		t.Cleanup(s.forgetKeys)
		return s
	}
	return StartPrivate(t, opts...)
}

// StartPrivate always starts a private redis-server, even when REDIS_ADDR is
// set. Fault tests use it.
func StartPrivate(t testing.TB, opts ...Option) *Server {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("redistest: redis-server is not on PATH (install the redis-server package): %v", err)
	}
	var extra []string
	for _, o := range opts {
		o(&extra)
	}
	s := &Server{t: t, dir: t.TempDir(), private: true, args: extra}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		s.port = freePort(t)
		s.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
		if lastErr = s.spawn(); lastErr == nil {
			t.Cleanup(s.stop)
			return s
		}
	}
	t.Fatalf("redistest: cannot start redis-server: %v", lastErr)
	return nil
}

func (s *Server) spawn() error {
	extra := make([]string, len(s.args))
	for i, a := range s.args {
		extra[i] = strings.ReplaceAll(a, "{port}", strconv.Itoa(s.port))
	}
	args := append([]string{
		"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.dir,
		"--enable-debug-command", "yes", "--protected-mode", "no",
		"--logfile", filepath.Join(s.dir, "redis.log"),
	}, extra...)
	p := &process{cmd: exec.Command("redis-server", args...), done: make(chan struct{})}
	if err := p.cmd.Start(); err != nil {
		return err
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-p.done:
			log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
			return fmt.Errorf("redis-server exited (%w): %s", p.err, lastLines(string(log), 5))
		default:
		}
		if ping(s.addr, extra) == nil {
			s.mu.Lock()
			s.proc = p
			s.mu.Unlock()
			return nil
		}
		time.Sleep(5 * time.Millisecond)
	}
	p.kill()
	return fmt.Errorf("redis-server on %s did not answer PING in 10s", s.addr)
}

// ping sends PING (with AUTH if the server was started with requirepass)
// over a raw connection.
func ping(addr string, args []string) error {
	conn, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Second))
	cmd := "PING\r\n"
	for i := 0; i+1 < len(args); i++ {
		if args[i] == "--requirepass" {
			cmd = "AUTH " + args[i+1] + "\r\n" + cmd
		}
		if args[i] == "--tls-port" {
			conn = tls.Client(conn, &tls.Config{InsecureSkipVerify: true}) // only to see it answer
		}
	}
	if _, err := conn.Write([]byte(cmd)); err != nil {
		return err
	}
	r := bufio.NewReader(conn)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return err
		}
		if strings.HasPrefix(line, "-LOADING") || strings.HasPrefix(line, "-ERR") {
			return fmt.Errorf("%s", strings.TrimSpace(line))
		}
		if strings.HasPrefix(line, "+PONG") || strings.HasPrefix(line, "-NOAUTH") {
			return nil // it answers; authentication is the test's business
		}
	}
}

func freePort(t testing.TB) int {
	port, err := pickPort()
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	return port
}

// pickPort returns a loopback port that was free a moment ago.
func pickPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("no free port: %w", err)
	}
	defer l.Close()
	addr, ok := l.Addr().(*net.TCPAddr)
	if !ok {
		return 0, fmt.Errorf("%v is not a TCP address", l.Addr())
	}
	return addr.Port, nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// Addr is the server's host:port.
func (s *Server) Addr() string { return s.addr }

// URL is a redis:// URL of the server.
func (s *Server) URL() string { return "redis://" + s.addr }

// Private reports whether the server was started by this package (and so
// may be killed, paused or restarted).
func (s *Server) Private() bool { return s.private }

// Client returns a go-redis client of the server, closed when the test ends.
func (s *Server) Client() *redis.Client {
	c := redis.NewClient(&redis.Options{
		Addr: s.addr, DisableIdentity: true,
		ContextTimeoutEnabled:    true, // as storefx's clients: the modules refuse others
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
	s.t.Cleanup(func() { _ = c.Close() })
	return c
}

// forgetKeys deletes, from a shared server, the keys under the prefixes
// Prefix gave this test (never anything else: a shared server is never
// flushed).
func (s *Server) forgetKeys() {
	rdb := redis.NewClient(&redis.Options{Addr: s.addr})
	defer rdb.Close()
	ctx := context.Background()
	pattern := fmt.Sprintf("rt%d-*-%s:*", os.Getpid(), globEscape(sanitize(s.t.Name())))
	iter := rdb.Scan(ctx, 0, pattern, 1000).Iterator()
	for iter.Next(ctx) {
		rdb.Del(ctx, iter.Val())
	}
}

func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

var prefixSeq atomic.Int64

// Prefix returns a key prefix unique to this process and call, so tests that
// share a server never collide.
func Prefix(t testing.TB) string {
	return fmt.Sprintf("rt%d-%d-%s:", os.Getpid(), prefixSeq.Add(1), sanitize(t.Name()))
}

func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '/' || r == ' ' || r == '{' || r == '}' {
			return '_'
		}
		return r
	}, s)
}

func (s *Server) mustPrivate(what string) {
	s.t.Helper()
	if !s.private {
		s.t.Skipf("redistest: %s needs a private server (REDIS_ADDR is shared)", what)
	}
}

// Kill stops the server at once (SIGKILL) and waits until it has exited.
func (s *Server) Kill() {
	s.t.Helper()
	s.mustPrivate("Kill")
	s.stop()
}

// Restart kills the server and starts a new, empty one on the same port:
// data and the script cache are gone, as after a crash without persistence.
func (s *Server) Restart() {
	s.t.Helper()
	s.Kill()
	var err error
	for i := 0; i < 50; i++ {
		if err = s.spawn(); err == nil {
			return
		}
		time.Sleep(20 * time.Millisecond) // the port may linger briefly
	}
	s.t.Fatalf("redistest: restart on %s: %v", s.addr, err)
}

// Start brings a killed server back (empty) on the same port.
func (s *Server) Start() { s.Restart() }

// Pause makes the server stop answering clients for d (CLIENT PAUSE ALL).
func (s *Server) Pause(ctx context.Context, d time.Duration) {
	s.t.Helper()
	s.mustPrivate("Pause")
	c := s.Client()
	if err := c.Do(ctx, "CLIENT", "PAUSE", d.Milliseconds(), "ALL").Err(); err != nil {
		s.t.Fatalf("redistest: CLIENT PAUSE: %v", err)
	}
}

// Sleep makes the server sleep for d (DEBUG SLEEP: it answers nobody, and
// reads what clients send only when it wakes), returning once it is asleep
// (a PING sent after DEBUG SLEEP goes unanswered for 20 ms); the channel
// closes when it wakes.
//
// DEBUG SLEEP is written on a connection of its own before the first PING
// is sent: with a client's goroutine sending it, a loaded machine could run
// the PING first, see it time out and return while the server was awake (a
// breaker test's first command was then answered, in CI).
func (s *Server) Sleep(d time.Duration) <-chan struct{} {
	s.t.Helper()
	s.mustPrivate("Sleep")
	conn, err := net.DialTimeout("tcp", s.addr, time.Second)
	if err != nil {
		s.t.Fatalf("redistest: DEBUG SLEEP: %v", err)
	}
	s.t.Cleanup(func() { _ = conn.Close() })
	if _, err := fmt.Fprintf(conn, "DEBUG SLEEP %s\r\n", strconv.FormatFloat(d.Seconds(), 'f', -1, 64)); err != nil {
		s.t.Fatalf("redistest: DEBUG SLEEP: %v", err)
	}
	woke := make(chan struct{})
	go func() {
		defer close(woke)
		_, _ = bufio.NewReader(conn).ReadString('\n') // its +OK, or the connection closed
	}()
	probe := s.Client()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		err := probe.Ping(ctx).Err()
		cancel()
		if err != nil {
			return woke
		}
	}
}

func (s *Server) stop() {
	s.mu.Lock()
	p := s.proc
	s.proc = nil
	s.mu.Unlock()
	if p != nil {
		p.kill()
	}
}

// LogTail returns the last n lines of the server's log, for failure reports.
func (s *Server) LogTail(n int) string {
	if s.dir == "" {
		return ""
	}
	b, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
	return lastLines(string(b), n)
}
