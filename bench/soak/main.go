// Command soak runs the redisfx benchmark server (storefx, idempotencyfx,
// httpfx and metrics, without the payments example's in-memory ledger, which
// grows by design) under mixed load (new keys,
// replays, concurrent duplicates, mismatches, failures, requests without a
// key) for a long time, and samples the process's goroutines and memory
// from /metrics, so that a leak shows as growth. `make soak` runs it for 10
// minutes; it ends by itself.
//
//	go run ./bench/soak -d 10m -c 8
package main

import (
	"github.com/redisfx/redisfx/bench/internal/local"

	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	dur := flag.Duration("d", 10*time.Minute, "how long to run")
	conns := flag.Int("c", 8, "concurrent clients")
	every := flag.Duration("sample", 30*time.Second, "sampling interval")
	flag.Parse()

	dir, _ := os.MkdirTemp("", "redisfx-soak")
	defer os.RemoveAll(dir)
	redisAddr, stopRedis := local.StartRedis(dir)
	defer stopRedis()

	bin := filepath.Join(dir, "benchserver")
	if out, err := exec.Command("go", "build", "-o", bin, "./bench/benchserver").CombinedOutput(); err != nil {
		log.Fatalf("build: %v\n%s", err, out)
	}
	addr := local.FreeAddr()
	app := exec.Command(bin, "-mode", "redisfx", "-addr", addr, "-redis", "redis://"+redisAddr, "-prefix", "soak:")
	app.Stderr = io.Discard
	must(app.Start())
	defer func() { _ = app.Process.Signal(os.Interrupt); _ = app.Wait() }()
	local.WaitListening(addr)
	base := "http://" + addr

	ctx, cancel := context.WithTimeout(context.Background(), *dur)
	defer cancel()
	var requests, failures atomic.Int64
	var wg sync.WaitGroup
	for c := 0; c < *conns; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := &http.Client{Timeout: 30 * time.Second}
			for ctx.Err() == nil {
				status := mixed(client, base)
				requests.Add(1)
				if status == 0 {
					failures.Add(1)
				}
			}
		}()
	}

	fmt.Printf("| elapsed | requests | goroutines | heap in use (MiB) | RSS (MiB) |\n|---|---|---|---|---|\n")
	var first, last map[string]float64
	tick := time.NewTicker(*every)
	defer tick.Stop()
	began := time.Now()
	sample := func() {
		m, err := scrape(base + "/metrics")
		must(err)
		if first == nil {
			first = m
		}
		last = m
		fmt.Printf("| %v | %d | %.0f | %.1f | %.1f |\n", time.Since(began).Round(time.Second), requests.Load(),
			m["go_goroutines"], m["go_memstats_heap_inuse_bytes"]/(1<<20), m["process_resident_memory_bytes"]/(1<<20))
	}
	time.Sleep(5 * time.Second) // warm up before the first sample
	sample()
	for ctx.Err() == nil {
		select {
		case <-tick.C:
			sample()
		case <-ctx.Done():
		}
	}
	wg.Wait()
	sample()
	fmt.Printf("\n%d requests in %v (%.0f/s), %d transport failures; goroutines %.0f → %.0f, heap %.1f → %.1f MiB\n",
		requests.Load(), dur, float64(requests.Load())/dur.Seconds(), failures.Load(),
		first["go_goroutines"], last["go_goroutines"],
		first["go_memstats_heap_inuse_bytes"]/(1<<20), last["go_memstats_heap_inuse_bytes"]/(1<<20))
}

// mixed sends one request of a random kind.
func mixed(c *http.Client, base string) int {
	k := rand.IntN(100)
	key := "soak-" + strconv.FormatUint(rand.Uint64(), 36)
	body := `{"amount":1250,"currency":"EUR","card":"4242424242424242"}`
	switch {
	case k < 40: // new key
	case k < 70: // replay of a small set of hot keys
		key = "hot-" + strconv.Itoa(rand.IntN(50))
	case k < 80: // concurrent duplicates
		key = "dup-" + strconv.Itoa(rand.IntN(1000000))
		var wg sync.WaitGroup
		for i := 0; i < 3; i++ {
			wg.Add(1)
			go func() { defer wg.Done(); post(c, base, key, body) }()
		}
		wg.Wait()
	case k < 85: // mismatch
		key = "hot-" + strconv.Itoa(rand.IntN(50))
		body = `{"amount":9,"currency":"EUR","card":"4242424242424242"}`
	case k < 90: // processor failure
		body = `{"amount":1,"currency":"EUR","card":"4000000000000119"}`
	default: // no key
		key = ""
	}
	return post(c, base, key, body)
}

func post(c *http.Client, base, key, body string) int {
	req, _ := http.NewRequest(http.MethodPost, base+"/payments", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// sampled are the series the soak compares, under the standard names
// metricsfx serves the Go and process collectors with.
var sampled = []string{"go_goroutines", "go_memstats_heap_inuse_bytes", "process_resident_memory_bytes"}

// scrape reads the samples of /metrics; a missing sampled series is an error,
// so that a renamed one cannot read as 0 and hide a leak.
func scrape(url string) (map[string]float64, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 2 && !strings.HasPrefix(f[0], "#") {
			v, _ := strconv.ParseFloat(f[1], 64)
			out[f[0]] = v
		}
	}
	for _, n := range sampled {
		if _, ok := out[n]; !ok {
			return nil, fmt.Errorf("%s lacks %s", url, n)
		}
	}
	return out, sc.Err()
}

func must(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
