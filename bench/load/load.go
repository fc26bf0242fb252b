// Package load is a closed-loop HTTP load generator for the payments
// handler: a fixed number of connections, each sending its next request when
// the previous answer arrives, for a fixed time.
package load

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Keys chooses the idempotency key of each request.
type Keys string

const (
	// Unique: every request a new key (the new-key path).
	Unique Keys = "unique"
	// One: every request the same key, recorded beforehand (the replay path).
	One Keys = "one"
	// None: no key header (the pass-through path).
	None Keys = "none"
)

// Options of a run.
type Options struct {
	URL         string
	Connections int
	Duration    time.Duration
	Keys        Keys
	Body        string
	// KeyPrefix keeps the keys of different runs apart.
	KeyPrefix string
	// Method is the request method; default POST. A GET sends no body.
	Method string
}

// Result of a run.
type Result struct {
	Requests   int
	Errors     int
	Elapsed    time.Duration
	P50, P90   time.Duration
	P99, Max   time.Duration
	Statuses   map[int]int
	latencyLog []time.Duration
}

// RPS is requests per second.
func (r Result) RPS() float64 { return float64(r.Requests) / r.Elapsed.Seconds() }

// Run drives the load and returns the figures.
func Run(ctx context.Context, o Options) (Result, error) {
	tr := &http.Transport{MaxIdleConns: o.Connections, MaxIdleConnsPerHost: o.Connections, MaxConnsPerHost: o.Connections}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	if o.Keys == One { // record it first, so every measured request is a replay
		if _, err := send(ctx, client, o, o.KeyPrefix+"one"); err != nil {
			return Result{}, err
		}
	}
	var seq atomic.Int64
	var mu sync.Mutex
	res := Result{Statuses: map[int]int{}}
	ctx, cancel := context.WithTimeout(ctx, o.Duration)
	defer cancel()
	began := time.Now()
	var wg sync.WaitGroup
	for c := 0; c < o.Connections; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lat := make([]time.Duration, 0, 4096)
			statuses := map[int]int{}
			errs := 0
			for ctx.Err() == nil {
				key := ""
				switch o.Keys {
				case Unique:
					key = o.KeyPrefix + strconv.FormatInt(seq.Add(1), 36)
				case One:
					key = o.KeyPrefix + "one"
				}
				t0 := time.Now()
				status, err := send(ctx, client, o, key)
				if ctx.Err() != nil {
					break // the run ended mid-request: not counted
				}
				lat = append(lat, time.Since(t0))
				if err != nil {
					errs++
					continue
				}
				statuses[status]++
			}
			mu.Lock()
			res.latencyLog = append(res.latencyLog, lat...)
			res.Errors += errs
			for s, n := range statuses {
				res.Statuses[s] += n
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	res.Elapsed = time.Since(began)
	res.Requests = len(res.latencyLog)
	if res.Requests == 0 {
		return res, fmt.Errorf("no request completed")
	}
	sort.Slice(res.latencyLog, func(i, j int) bool { return res.latencyLog[i] < res.latencyLog[j] })
	q := func(p float64) time.Duration { return res.latencyLog[int(p*float64(res.Requests-1))] }
	res.P50, res.P90, res.P99, res.Max = q(0.50), q(0.90), q(0.99), res.latencyLog[res.Requests-1]
	return res, nil
}

func send(ctx context.Context, c *http.Client, o Options, key string) (int, error) {
	method, body := o.Method, io.Reader(strings.NewReader(o.Body))
	if method == "" {
		method = http.MethodPost
	}
	if method == http.MethodGet {
		body = nil
	}
	req, err := http.NewRequestWithContext(ctx, method, o.URL, body)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}
