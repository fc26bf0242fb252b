package main

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redisfx/redisfx/internal/redistest"
)

// envOf loads the example's settings from vars (every other variable
// unset).
func envOf(t *testing.T, vars map[string]string) Env {
	t.Helper()
	env, err := LoadEnv(func(name string) string { return vars[name] })
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// The server's timeouts cover the longest request the settings allow: the
// request read within ReadTimeout, then a duplicate's wait of
// IDEMPOTENCY_WAIT_TIMEOUT and, if it takes the record over, the payment
// (PAYMENTS_DELAY, and PAYMENTS_LOCK_WAIT with the card lock). Its answer
// is never cut by the WriteTimeout (found by an adversary: PAYMENTS_DELAY=62s
// or IDEMPOTENCY_WAIT_TIMEOUT=61s got an empty reply from httpfx's default
// 60 s), a stop waits for it (IDEMPOTENCY_WAIT_TIMEOUT and a stalled upload
// outlived the 15 s drain and the process exited 1), and the stop timeout
// leaves room after the drain for the span flush and closing Redis.
func TestHTTPConfig_TimeoutsCoverTheLongestRequest(t *testing.T) {
	for _, vars := range []map[string]string{
		nil,
		{"PAYMENTS_DELAY": "62s"},
		{"IDEMPOTENCY_WAIT_TIMEOUT": "61s"},
		{"IDEMPOTENCY_WAIT_TIMEOUT": "0"},
		{"PAYMENTS_DELAY": "40s", "IDEMPOTENCY_WAIT_TIMEOUT": "50s", "PAYMENTS_CARD_LOCK": "on", "PAYMENTS_LOCK_WAIT": "30s"},
		{"PAYMENTS_DELAY": "40s", "PAYMENTS_LOCK_WAIT": "30s"}, // the lock wait counts only with the lock on
	} {
		env := envOf(t, vars)
		cfg := httpConfig(env)
		read := cfg.ReadTimeout
		if read == 0 {
			read = 30 * time.Second // httpfx's default
		}
		work := env.PaymentsDelay
		if env.CardLock {
			work += env.LockWait
		}
		longest := read + env.WaitTimeout + work
		if cfg.WriteTimeout <= longest || cfg.WriteTimeout < 60*time.Second {
			t.Errorf("%v: WriteTimeout %v, want above %v (read, wait, payment) and at least httpfx's 60s", vars, cfg.WriteTimeout, longest)
		}
		if cfg.ShutdownTimeout <= longest {
			t.Errorf("%v: ShutdownTimeout %v, want above %v (read, wait, payment)", vars, cfg.ShutdownTimeout, longest)
		}
		if stop := stopTimeout(env); stop < cfg.ShutdownTimeout+10*time.Second {
			t.Errorf("%v: stop timeout %v, want the drain %v and room to flush and close", vars, stop, cfg.ShutdownTimeout)
		}
	}
	// The numbers docs/payments.md gives for the defaults.
	env := envOf(t, nil)
	cfg := httpConfig(env)
	if cfg.ReadTimeout != 10*time.Second || cfg.WriteTimeout != 60*time.Second || cfg.ShutdownTimeout != 35*time.Second || stopTimeout(env) != 50*time.Second {
		t.Errorf("defaults: read %v, write %v, drain %v, stop %v; docs/payments.md says 10s, 60s, 35s, 50s",
			cfg.ReadTimeout, cfg.WriteTimeout, cfg.ShutdownTimeout, stopTimeout(env))
	}
	env = envOf(t, map[string]string{"PAYMENTS_DELAY": "62s"})
	if got := httpConfig(env).WriteTimeout; got != 97*time.Second {
		t.Errorf("PAYMENTS_DELAY=62s: WriteTimeout %v, want 97s (10s read + 10s wait + 62s + 15s)", got)
	}
}

// try is pay without failing the test, for goroutines.
func (p *proc) try(key, body string) (resp, error) {
	req, _ := http.NewRequest(http.MethodPost, p.url+"/payments", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		return resp{}, err
	}
	defer r.Body.Close()
	b, err := io.ReadAll(r.Body)
	return resp{r.StatusCode, r.Header, string(b)}, err
}

// exits0 waits for p to exit within d and fails unless it exits 0.
func (p *proc) exits0(within time.Duration) {
	p.t.Helper()
	select {
	case err := <-p.exited:
		p.exited <- err
		if err != nil {
			p.t.Fatalf("exit: %v, want 0", err)
		}
	case <-time.After(within):
		p.t.Fatalf("did not exit within %v of SIGTERM", within)
	}
}

// A stop waits for a duplicate that waits for its first request, however
// long IDEMPOTENCY_WAIT_TIMEOUT lets it: here the first runs on another
// process for 18 s, longer than the 15 s the drain had beyond
// PAYMENTS_DELAY. (Found by an adversary: the waiting client was cut off
// and the process exited 1.)
func TestPayments_GracefulStop_WaitsForAWaitingDuplicate(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	prefix := redistest.Prefix(t)
	owner := start(t, "REDIS_URL="+srv.URL(), "IDEMPOTENCY_KEY_PREFIX="+prefix, "PAYMENTS_DELAY=18s")
	waiter := start(t, "REDIS_URL="+srv.URL(), "IDEMPOTENCY_KEY_PREFIX="+prefix, "IDEMPOTENCY_WAIT_TIMEOUT=30s")
	first := make(chan resp, 1)
	go func() { r, _ := owner.try("long", card); first <- r }()
	inProgress(t, srv, prefix+"long")
	type answer struct {
		r   resp
		err error
	}
	dup := make(chan answer, 1)
	go func() { r, err := waiter.try("long", card); dup <- answer{r, err} }()
	waitUntil(t, func() bool { // the duplicate waits: it listens on the record's channel
		n := srv.Client().PubSubNumSub(context.Background(), prefix+"long").Val()
		return n[prefix+"long"] > 0
	})
	_ = waiter.cmd.Process.Signal(syscall.SIGTERM)
	a := <-dup
	if a.err != nil || a.r.status != 201 || a.r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("the waiting duplicate during the stop: %+v, %v", a.r, a.err)
	}
	waiter.exits0(30 * time.Second)
	if r := <-first; r.status != 201 {
		t.Fatalf("first: %+v", r)
	}
}

// A stop does not fail on a client that stalls in the middle of its body:
// the read of the request ends at ReadTimeout (10 s), within the drain.
// (Found by an adversary: httpfx's default 30 s ReadTimeout outlived the
// 15 s drain and the process exited 1.)
func TestPayments_GracefulStop_StalledUploadEndsWithinTheDrain(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	p := start(t, "REDIS_URL="+srv.URL(), "IDEMPOTENCY_KEY_PREFIX="+redistest.Prefix(t))
	conn, err := net.Dial("tcp", strings.TrimPrefix(p.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, err = io.WriteString(conn, "POST /payments HTTP/1.1\r\nHost: payments\r\nIdempotency-Key: stalled\r\n"+
		"Content-Type: application/json\r\nContent-Length: 200\r\n\r\n"+`{"amount":12`)
	if err != nil {
		t.Fatal(err)
	}
	// Let the server read the headers (it then waits for the body), so the
	// stop finds the request in flight, not a connection still new.
	time.Sleep(200 * time.Millisecond)
	began := time.Now()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	p.exits0(40 * time.Second)
	if d := time.Since(began); d > 15*time.Second {
		t.Errorf("the stop took %v, want about the 10 s ReadTimeout", d)
	}
	// The stalled client got an answer or a closed connection, not a hang.
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := bufio.NewReader(conn).ReadString('\n'); err != nil && !errors.Is(err, io.EOF) && !strings.Contains(err.Error(), "reset") {
		t.Fatalf("the stalled connection: %v", err)
	}
}

// A payment without an idempotency key reads its body before the simulated
// latency, within the read timeout: a body that did not arrive with the
// headers was read after PAYMENTS_DELAY, past the 10 s ReadTimeout, and
// answered 400.
func TestPayments_NoKey_BodyReadBeforeTheDelay(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	p := start(t, "REDIS_URL="+srv.URL(), "PAYMENTS_DELAY=11s")
	if r := p.pay("", card+strings.Repeat(" ", 32<<10)); r.status != 201 {
		t.Fatalf("a 32 KiB payment without a key, PAYMENTS_DELAY=11s: %d %s", r.status, r.body)
	}
}
