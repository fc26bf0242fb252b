package load

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// WrkAvailable reports whether wrk is on PATH.
func WrkAvailable() bool {
	_, err := exec.LookPath("wrk")
	return err == nil
}

// RunWrk drives the same load as Run with wrk (2 threads, o.Connections
// connections), the generator issue 16's targets are stated with. wrk
// spends far less CPU per request than Go's HTTP client, so on a machine
// whose cores the server shares with the generator the server gets more of
// them: every ratio of two servers is further from 1 than with Run.
//
// wrk reports no status per code: Statuses has the 2xx/3xx answers under
// 200 and the others under 0.
func RunWrk(ctx context.Context, o Options) (Result, error) {
	if o.Keys == One { // record it first, so every measured request is a replay
		client := &http.Client{Timeout: 30 * time.Second}
		if _, err := send(ctx, client, o, o.KeyPrefix+"one"); err != nil {
			return Result{}, err
		}
	}
	script, err := os.CreateTemp("", "redisfx-wrk-*.lua")
	if err != nil {
		return Result{}, err
	}
	defer os.Remove(script.Name())
	if _, err := script.WriteString(wrkScript(o)); err != nil {
		return Result{}, err
	}
	if err := script.Close(); err != nil {
		return Result{}, err
	}
	secs := max(int(o.Duration.Round(time.Second)/time.Second), 1)
	cmd := exec.CommandContext(ctx, "wrk", "-t2", "-c"+strconv.Itoa(o.Connections), "-d"+strconv.Itoa(secs)+"s",
		"--timeout", "30s", "-s", script.Name(), o.URL)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return Result{}, fmt.Errorf("wrk: %w: %s", err, stderr.String())
	}
	return parseWrk(out.String())
}

// wrkScript sets the method, body and headers of o, a new key per request
// for Unique (thread id and a counter: wrk runs one Lua state per thread),
// and prints one summary line the parser reads.
func wrkScript(o Options) string {
	method := o.Method
	if method == "" {
		method = http.MethodPost
	}
	var b strings.Builder
	fmt.Fprintf(&b, "wrk.method = %q\n", method)
	if method != http.MethodGet {
		fmt.Fprintf(&b, "wrk.body = %q\n", o.Body)
		b.WriteString("wrk.headers[\"Content-Type\"] = \"application/json\"\n")
	}
	switch o.Keys {
	case One:
		fmt.Fprintf(&b, "wrk.headers[\"Idempotency-Key\"] = %q\n", o.KeyPrefix+"one")
	case Unique:
		fmt.Fprintf(&b, `local threads = 0
function setup(thread)
  threads = threads + 1
  thread:set("tid", threads)
end
local n = 0
local headers = {}
function init(args)
  for k, v in pairs(wrk.headers) do headers[k] = v end -- wrk.format takes these or the defaults
end
function request()
  n = n + 1
  headers["Idempotency-Key"] = %q .. tid .. "-" .. n
  return wrk.format(nil, nil, headers, nil)
end
`, o.KeyPrefix)
	}
	b.WriteString(`function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("WRK %d %d %d %d %d %d %d %d\n", summary.requests, summary.duration,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max,
    e.status, e.connect + e.read + e.write + e.timeout))
end
`)
	return b.String()
}

// parseWrk reads the line of wrkScript's done.
func parseWrk(out string) (Result, error) {
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 9 || f[0] != "WRK" {
			continue
		}
		var v [8]int64
		for i := range v {
			n, err := strconv.ParseInt(f[i+1], 10, 64)
			if err != nil {
				return Result{}, fmt.Errorf("wrk summary %q: %w", sc.Text(), err)
			}
			v[i] = n
		}
		us := func(n int64) time.Duration { return time.Duration(n) * time.Microsecond }
		res := Result{Requests: int(v[0]), Elapsed: us(v[1]), P50: us(v[2]), P90: us(v[3]), P99: us(v[4]), Max: us(v[5]),
			Errors: int(v[7]), Statuses: map[int]int{200: int(v[0] - v[6])}}
		if v[6] > 0 {
			res.Statuses[0] = int(v[6])
		}
		if res.Requests == 0 {
			return res, fmt.Errorf("no request completed")
		}
		return res, nil
	}
	return Result{}, fmt.Errorf("no summary in wrk's output: %s", out)
}
