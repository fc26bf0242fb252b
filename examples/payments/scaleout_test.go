package main

import (
	"context"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisfx/redisfx/internal/redistest"
)

// Three processes behind one Redis behave as one: ~1000 requests over 100
// keys, duplicates sent concurrently to different processes, execute each
// key exactly once; every answer is the recorded one.
func TestScaleOut_ThreeProcessesOneRedis(t *testing.T) {
	if testing.Short() {
		t.Skip("three processes and a thousand requests")
	}
	t.Parallel()
	srv := redistest.Start(t)
	prefix := redistest.Prefix(t)
	env := []string{"REDIS_URL=" + srv.URL(), "IDEMPOTENCY_KEY_PREFIX=" + prefix, "PAYMENTS_DELAY=20ms", "IDEMPOTENCY_TTL=1h"}
	procs := []*proc{start(t, env...), start(t, env...), start(t, env...)}

	const keys, requests = 100, 1000
	type answer struct {
		key    string
		status int
		body   string
	}
	answers := make(chan answer, requests)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 48) // bounded concurrency on 2 cores
	for i := 0; i < requests; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			k := "k" + strconv.Itoa(rand.IntN(keys))
			if i < keys {
				k = "k" + strconv.Itoa(i) // every key at least once
			}
			amount := 100 + len(k) // same body for the same key
			r := procs[rand.IntN(3)].pay(k, `{"amount":`+strconv.Itoa(amount)+`,"currency":"EUR","card":"4242424242424242"}`)
			answers <- answer{k, r.status, r.body}
		}()
	}
	wg.Wait()
	close(answers)

	first := map[string]string{}
	conflicts := 0
	for a := range answers {
		switch a.status {
		case 201:
			if prev, ok := first[a.key]; ok && prev != a.body {
				t.Fatalf("key %s answered two different payments:\n%s\n%s", a.key, prev, a.body)
			}
			first[a.key] = a.body
		case 409: // documented: in progress past the wait timeout
			conflicts++
		default:
			t.Fatalf("key %s: status %d %s", a.key, a.status, a.body)
		}
	}
	executions := 0
	for _, p := range procs {
		executions += len(p.executions())
	}
	if executions != keys {
		t.Fatalf("%d executions across 3 processes for %d keys", executions, keys)
	}
	// Every record is in Redis, completed, with an expiry.
	ctx := context.Background()
	rdb := srv.Client()
	records := scanKeys(t, rdb, prefix)
	for _, k := range records {
		if ttl := rdb.PTTL(ctx, k).Val(); ttl <= 0 {
			t.Fatalf("%s has no expiry (%v)", k, ttl)
		}
		if s := rdb.HGet(ctx, k, "s").Val(); s != "c" {
			t.Fatalf("%s in state %q", k, s)
		}
	}
	if found := len(records); found != keys {
		t.Fatalf("%d records in Redis, want %d", found, keys)
	}
	t.Logf("%d requests, %d keys, %d executions, %d documented 409s", requests, keys, executions, conflicts)
}

// An app process killed (SIGKILL) mid-handler: after LockTimeout, each
// abandoned key is taken over exactly once by another process.
func TestKilledProcess_AbandonedKeysTakenOverOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("kills a process")
	}
	t.Parallel()
	srv := redistest.Start(t)
	prefix := redistest.Prefix(t)
	env := []string{"REDIS_URL=" + srv.URL(), "IDEMPOTENCY_KEY_PREFIX=" + prefix, "IDEMPOTENCY_LOCK_TIMEOUT=400ms", "IDEMPOTENCY_WAIT_TIMEOUT=10s"}
	victim := start(t, append(env, "PAYMENTS_DELAY=5s")...)
	const n = 20
	for i := 0; i < n; i++ {
		go payQuiet(victim, "abandoned-"+strconv.Itoa(i))
	}
	ctx := context.Background()
	rdb := srv.Client()
	waitUntil(t, func() bool { return len(scanKeys(t, rdb, prefix)) == n }) // all claimed
	_ = victim.cmd.Process.Signal(syscall.SIGKILL)
	dead := map[string]int64{} // the dead owners' fencing tokens
	for _, k := range scanKeys(t, rdb, prefix) {
		dead[k], _ = rdb.HGet(ctx, k, "n").Int64()
	}

	survivor := start(t, append(env, "PAYMENTS_DELAY=50ms")...)
	var wg sync.WaitGroup
	var mu sync.Mutex
	bodies := make([]map[string]bool, n)
	for i := range bodies {
		bodies[i] = map[string]bool{}
	}
	for i := 0; i < n; i++ {
		for d := 0; d < 3; d++ { // three retries of each abandoned key at once
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := survivor.pay("abandoned-"+strconv.Itoa(i), card)
				mu.Lock()
				bodies[i][strconv.Itoa(r.status)+" "+r.body] = true
				mu.Unlock()
			}()
		}
	}
	wg.Wait()
	for i, b := range bodies {
		if len(b) != 1 {
			t.Fatalf("key %d answered differently: %v", i, b)
		}
	}
	if got := len(survivor.executions()); got != n {
		t.Fatalf("%d takeovers for %d abandoned keys", got, n)
	}
	for _, k := range scanKeys(t, rdb, prefix) {
		// Above the dead owner's, also when its record expired first on a
		// loaded machine and the takeover was a fresh claim.
		if tok, _ := rdb.HGet(ctx, k, "n").Int64(); tok <= dead[k] {
			t.Fatalf("%s fencing token %d, want above the dead owner's %d", k, tok, dead[k])
		}
	}
}

// payQuiet sends a payment and ignores the outcome: the process may die.
func payQuiet(p *proc, key string) {
	req, _ := http.NewRequest(http.MethodPost, p.url+"/payments", strings.NewReader(card))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
	}
}

// scanKeys lists the records under prefix.
func scanKeys(t *testing.T, rdb *redis.Client, prefix string) []string {
	t.Helper()
	var keys []string
	ctx := context.Background()
	iter := rdb.Scan(ctx, 0, prefix+"*", 500).Iterator()
	for iter.Next(ctx) {
		// prefix + ":" names the library's own keys (the outbox index, its
		// relay's lease), never a record: a key's colons are escaped.
		if !strings.HasPrefix(iter.Val(), prefix+":") {
			keys = append(keys, iter.Val())
		}
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	return keys
}

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 20s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
