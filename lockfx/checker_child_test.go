package lockfx

// The lock checker's holder processes: the test binary run again in a
// helper mode (TestLockCheckerChild), one holder at a time, SIGKILLed and
// replaced by the fault injector. A child reports its holds as JSON lines
// on stdout; closing its stdin stops it cleanly.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// checkChildEnv carries a child's orders.
const checkChildEnv = "LOCKFX_CHECK_CHILD"

// checkEventPrefix marks a child's report lines among go test's own output.
const checkEventPrefix = "LOCKCHECK "

// checkChildOrders is what a child is told to do.
type checkChildOrders struct {
	Mode    string
	DialMap map[string]string
	Config  Config
	Seed    uint64
	Prefix  string // of its hold ids
}

// TestLockCheckerChild is a holder process of TestLockChecker; it does
// nothing in an ordinary run.
func TestLockCheckerChild(t *testing.T) {
	raw := os.Getenv(checkChildEnv)
	if raw == "" {
		t.Skip("a helper process of TestLockChecker")
	}
	var o checkChildOrders
	if err := json.Unmarshal([]byte(raw), &o); err != nil {
		t.Fatal(err)
	}
	rdb := dialCheckClient(o.Mode, o.DialMap)
	defer rdb.Close()
	l, err := New(rdb, o.Config)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		// End the give-backs still trying (the Module's stop hook does this in
		// an app), so that goleak finds no goroutine of them at exit.
		stopCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = l.Stop(stopCtx)
	}()
	ctx, stop := context.WithCancel(context.Background())
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); stop() }() // stdin closed: stop
	var mu sync.Mutex
	out := bufio.NewWriter(os.Stdout)
	report := func(e holdEvent) {
		b, _ := json.Marshal(e)
		mu.Lock()
		defer mu.Unlock()
		_, _ = out.WriteString(checkEventPrefix + string(b) + "\n")
		_ = out.Flush() // before the next step: a SIGKILL may come at any time
	}
	var stats checkStats
	var workers sync.WaitGroup
	fns := newFnRuns()
	for j := range checkWorkersPerLock {
		rng := rand.New(rand.NewPCG(o.Seed, uint64(j+1)))
		workers.Go(func() { holdLocks(ctx, l, o.Config, rng, fmt.Sprintf("%sw%d", o.Prefix, j), report, &stats, fns) })
	}
	workers.Wait()
	fns.stop(t, l)
}

// checkChildren runs the holder processes, one at a time.
type checkChildren struct {
	w       *checkWorld
	proxies *checkClient // every child dials through these
	n       int
	cur     *checkChild
	readers sync.WaitGroup
}

// checkChild is one holder process.
type checkChild struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	prefix string
	stderr bytes.Buffer

	mu       sync.Mutex
	killedAt time.Time
}

func newCheckChildren(w *checkWorld) *checkChildren {
	return &checkChildren{w: w, proxies: w.newProxies()}
}

// spawn starts the next holder process with a configuration drawn from
// the seed.
func (c *checkChildren) spawn() {
	w := c.w
	cfg := checkConfig(w.rng)
	w.maxTTL = max(w.maxTTL, cfg.TTL)
	c.n++
	orders, _ := json.Marshal(checkChildOrders{Mode: w.mode, DialMap: c.proxies.dialMap, Config: cfg,
		Seed: w.seed + uint64(c.n)<<32, Prefix: fmt.Sprintf("c%d.", c.n)})
	child := &checkChild{prefix: fmt.Sprintf("c%d.", c.n)}
	child.cmd = exec.Command(os.Args[0], "-test.run=^TestLockCheckerChild$", "-test.count=1")
	child.cmd.Env = append(os.Environ(), checkChildEnv+"="+string(orders))
	child.cmd.Stderr = &child.stderr
	stdout, err := child.cmd.StdoutPipe()
	if err != nil {
		w.t.Fatal(err)
	}
	if child.stdin, err = child.cmd.StdinPipe(); err != nil {
		w.t.Fatal(err)
	}
	if err := child.cmd.Start(); err != nil {
		w.t.Fatal(err)
	}
	c.cur = child
	c.readers.Go(func() {
		sc := bufio.NewScanner(stdout)
		var tail []string
		for sc.Scan() {
			line := sc.Text()
			payload, ok := strings.CutPrefix(line, checkEventPrefix)
			if !ok {
				tail = append(tail[max(0, len(tail)-20):], line)
				continue
			}
			var e holdEvent
			if err := json.Unmarshal([]byte(payload), &e); err != nil {
				w.t.Errorf("child %s: bad report %q: %v", child.prefix, line, err)
				continue
			}
			w.event(e)
		}
		err := child.cmd.Wait()
		child.mu.Lock()
		killedAt := child.killedAt
		child.mu.Unlock()
		if !killedAt.IsZero() {
			w.killed(child.prefix, killedAt)
			return
		}
		if err != nil {
			w.t.Errorf("holder process %s failed: %v\n%s\n%s", child.prefix, err, strings.Join(tail, "\n"), child.stderr.String())
		}
	})
}

// killAndReplace SIGKILLs the running holder process and starts another.
func (c *checkChildren) killAndReplace() {
	child := c.cur
	child.mu.Lock()
	child.killedAt = time.Now()
	child.mu.Unlock()
	_ = child.cmd.Process.Kill()
	c.spawn()
}

// stop asks the running holder process to finish (it releases what it
// holds) and waits for every report.
func (c *checkChildren) stop() {
	_ = c.cur.stdin.Close()
	c.readers.Wait()
}
