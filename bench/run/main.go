// Command run is `make bench`: it starts a private redis-server, builds the
// benchmark server, and measures, in one session, plain chi, the protocol's
// limit, the stack the README wires (real production logger, tracingfx with
// its default, metricsfx, httpfx, idempotencyfx), the same stack exporting
// spans over OTLP/HTTP to a receiver in this process at 10 % and 100 %
// sampling, the stack without tracingfx, the SDK floor (the limit on bare
// net/http traced with the bare OpenTelemetry SDK at 10 %) and its
// untraced baseline, the hand-assembled stack (bench/assembled: the limit
// behind otelhttp, a zap access log, Prometheus and redisotel) with the
// SDK's default and at 10 %, and the stripped server of earlier tables, on the
// three paths (new key, replay, no key) with the closed-loop load
// generator. Each repeat runs every server once, path by path, each
// repeat starting with another server, so the servers share the machine's
// conditions; the median of the repeats is reported with ratios, spreads
// and the server's and Redis's CPU per request, and each target also as
// the median of the ratios within each repeat (paired), which a drift of
// the VM's speed between repeats does not move; then tracing's added CPU
// against the SDK floor's (floor.go) and what one Redis serves per second
// (ceiling.go).
//
//	go run ./bench/run -c 32 -d 5s -repeat 3
//	go run ./bench/run -servers plain,limit,stack -repeat 5
//	go run ./bench/run -down -d 5s   # Redis killed: each policy, breaker on and off
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisfx/redisfx/bench/internal/local"
	"github.com/redisfx/redisfx/bench/load"
)

// server is one configuration measured.
type server struct {
	name, label string
	mode        string
	env         []string // OTEL_* settings; {recv} is the receiver's address
}

var servers = []server{
	{name: "plain", label: "plain chi", mode: "plain"},
	{name: "limit", label: "limit (only the protocol's round trips)", mode: "limit"},
	{name: "stack", label: "README stack, tracing default (request spans made, none exported)", mode: "stack"},
	{name: "stack-otlp10", label: "README stack, OTLP/HTTP export, 10 % sampled", mode: "stack",
		env: []string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://{recv}", "OTEL_TRACES_SAMPLER=parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG=0.1"}},
	{name: "stack-otlp100", label: "README stack, OTLP/HTTP export, every trace", mode: "stack",
		env: []string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://{recv}", "OTEL_TRACES_SAMPLER=parentbased_always_on"}},
	{name: "stack-notracing", label: "README stack without tracingfx", mode: "stack-notracing"},
	{name: "stack-emit", label: "README stack with streamfx, the handler emitting one event (idempotencyfx.Emit)", mode: "stack-emit"},
	// The floor under tracingfx's cost: the limit's round trips on bare
	// net/http, untraced, and traced with the bare OpenTelemetry SDK at
	// 10 % making the stack's spans (benchserver's floor.go).
	{name: "nethttp", label: "net/http and the limit's round trips (the SDK floor untraced)", mode: "nethttp"},
	{name: "sdk-floor", label: "SDK floor: net/http, the limit's round trips, bare OpenTelemetry SDK, OTLP/HTTP, 10 % sampled", mode: "sdk-floor",
		env: []string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://{recv}"}},
	// What a team assembles by hand around the limit's round trips:
	// otelhttp, chi's RequestID, a zap access log, a Prometheus middleware,
	// redisotel (bench/assembled, its own module).
	{name: "assembled", label: "hand-assembled: the limit's round trips, otelhttp, RequestID, zap access log, Prometheus, redisotel; SDK default", mode: "assembled"},
	{name: "assembled-otlp10", label: "hand-assembled, OTLP/HTTP export, 10 % sampled", mode: "assembled",
		env: []string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://{recv}", "OTEL_TRACES_SAMPLER=parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG=0.1"}},
	{name: "stripped", label: "stripped: no-op logger, no tracingfx (earlier tables' \"redisfx\")", mode: "redisfx"},
	// The payments example as users start it, only HTTP_ADDR and REDIS_URL
	// set: its own handler, which also caches each payment and publishes a
	// receipt to a stream, so it does more than the trivial handler.
	{name: "payments", label: "examples/payments with its defaults (its handler also caches and publishes a receipt)", mode: "payments"},
}

func main() {
	conns := flag.Int("c", 32, "connections")
	dur := flag.Duration("d", 5*time.Second, "duration of one measurement")
	repeat := flag.Int("repeat", 3, "measurements per cell (the median is reported)")
	only := flag.String("servers", "", "comma-separated subset of servers (default all)")
	down := flag.Bool("down", false, "measure the stack with Redis killed instead (each policy, breaker on and off)")
	gen := flag.String("gen", "auto", "load generator of the table: wrk (issue 16's: wrk -t2), go (bench/load, in process), or auto (wrk when it is on PATH)")
	flag.Parse()
	drive, generator := load.Run, "bench/load (Go's HTTP client, in the benchmark process)"
	switch {
	case *gen == "wrk" || *gen == "auto" && load.WrkAvailable():
		drive, generator = load.RunWrk, "wrk -t2"
	case *gen != "go" && *gen != "auto":
		log.Fatalf("-gen %q: want wrk, go or auto", *gen)
	}

	dir, err := os.MkdirTemp("", "redisfx-bench")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "benchserver")
	if out, err := exec.Command("go", "build", "-o", bin, "./bench/benchserver").CombinedOutput(); err != nil {
		log.Fatalf("build: %v\n%s", err, out)
	}
	payments := filepath.Join(dir, "payments")
	if out, err := exec.Command("go", "build", "-o", payments, "./examples/payments").CombinedOutput(); err != nil {
		log.Fatalf("build: %v\n%s", err, out)
	}
	assembled := filepath.Join(dir, "assembled")
	if out, err := exec.Command("go", "build", "-C", "bench/assembled", "-o", assembled, ".").CombinedOutput(); err != nil {
		log.Fatalf("build: %v\n%s", err, out)
	}
	if *down {
		measureDown(bin, dir, *conns, *dur, *repeat)
		return
	}
	rc := receiver()
	defer rc.close()
	recvAddr := rc.addr
	redisAddr, stopRedis := local.StartRedis(dir)
	defer stopRedis()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr, DisableIdentity: true})
	defer rdb.Close()

	chosen := servers
	if *only != "" {
		chosen = nil
		for _, n := range strings.Split(*only, ",") {
			for _, s := range servers {
				if s.name == n {
					chosen = append(chosen, s)
				}
			}
		}
	}
	body := `{"amount":1250,"currency":"EUR","card":"4242424242424242"}`
	paths := []load.Keys{load.Unique, load.One, load.None}
	results := map[string]map[load.Keys][]cell{}
	for _, s := range chosen {
		results[s.name] = map[load.Keys][]cell{}
	}
	for r := 0; r < *repeat; r++ {
		for _, path := range paths {
			// Each repeat starts with another server, so that a drift of
			// the machine within a repeat does not always favour the same
			// one.
			for i := range chosen {
				s := chosen[(i+r)%len(chosen)]
				addr := local.FreeAddr()
				prefix := fmt.Sprintf("bench:%s:%s:%d:", s.name, path, r)
				srv := exec.Command(bin, "-mode", s.mode, "-addr", addr, "-redis", "redis://"+redisAddr, "-prefix", prefix)
				srv.Env = serverEnv(s.env, recvAddr)
				if s.mode == "payments" {
					srv = exec.Command(payments)
					srv.Env = append(serverEnv(s.env, recvAddr), "HTTP_ADDR="+addr, "REDIS_URL=redis://"+redisAddr, "IDEMPOTENCY_KEY_PREFIX="+prefix)
				}
				if s.mode == "assembled" {
					srv = exec.Command(assembled, "-addr", addr, "-redis", "redis://"+redisAddr, "-prefix", prefix)
					srv.Env = serverEnv(s.env, recvAddr)
				}
				if err := srv.Start(); err != nil {
					log.Fatal(err)
				}
				local.WaitListening(addr)
				beforeTrips, beforeAll := commandCalls(rdb)
				beforeCPU, beforeRedis := cpuTime(srv.Process.Pid), redisCPU(rdb)
				beforeBytes, beforeSpans := rc.bytes.Load(), rc.spans.Load()
				res, err := drive(context.Background(), load.Options{URL: "http://" + addr + "/payments",
					Connections: *conns, Duration: *dur, Keys: path, Body: body,
					KeyPrefix: fmt.Sprintf("%s-%s-%d-", s.name, path, r)})
				cpu, redisUsed := cpuTime(srv.Process.Pid)-beforeCPU, redisCPU(rdb)-beforeRedis
				afterTrips, afterAll := commandCalls(rdb)
				_ = srv.Process.Signal(os.Interrupt)
				_ = srv.Wait()
				// After the server stopped: its exporter's last batch is in.
				exported, spanCount := rc.bytes.Load()-beforeBytes, rc.spans.Load()-beforeSpans
				shapes := rc.takeShapes()
				if r == 0 {
					printShapes(s.name, path, shapes)
				}
				if err != nil {
					log.Fatalf("%s %s: %v", s.name, path, err)
				}
				n := float64(res.Requests)
				results[s.name][path] = append(results[s.name][path], cell{res: res,
					calls: stats{float64(afterTrips-beforeTrips) / n, float64(afterAll-beforeAll) / n},
					cpu:   cpu / time.Duration(res.Requests), redisCPU: redisUsed / time.Duration(res.Requests), exportBytes: float64(exported) / n, spans: float64(spanCount) / n})
				fmt.Fprintf(os.Stderr, "%-16s %-7s run %d: %8.0f req/s p50 %v p99 %v cpu/req %v redis cpu/req %v errors %d statuses %v\n",
					s.name, path, r+1, res.RPS(), res.P50, res.P99, cpu/time.Duration(res.Requests), redisUsed/time.Duration(res.Requests), res.Errors, res.Statuses)
			}
		}
	}
	report(results, chosen, paths, *conns, *dur, *repeat, generator)
}

// serverEnv is this process's environment without OTEL_* and TRACING_*
// settings, plus env with {recv} replaced.
func serverEnv(env []string, recv string) []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OTEL_") && !strings.HasPrefix(kv, "TRACING_") {
			out = append(out, kv)
		}
	}
	for _, kv := range env {
		out = append(out, strings.ReplaceAll(kv, "{recv}", recv))
	}
	return out
}

// cpuTime is the user+system CPU time the process used so far (Linux).
func cpuTime(pid int) time.Duration {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	s := string(raw)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * time.Second / 100 // USER_HZ
}

type cell struct {
	res         load.Result
	calls       stats         // per request
	cpu         time.Duration // the server's, per request
	redisCPU    time.Duration // redis-server's, per request
	exportBytes float64
	spans       float64 // exported per request
}

// stats are INFO commandstats deltas per request: round trips (script
// calls, as the servers send nothing else on the request path) and every
// command Redis executed, those inside scripts included.
type stats struct{ trips, commands float64 }

func median(cs []cell) (cell, float64, float64) {
	cs = append([]cell(nil), cs...)
	sort.Slice(cs, func(i, j int) bool { return cs[i].res.RPS() < cs[j].res.RPS() })
	return cs[len(cs)/2], cs[0].res.RPS(), cs[len(cs)-1].res.RPS()
}

func report(results map[string]map[load.Keys][]cell, chosen []server, paths []load.Keys, conns int, dur time.Duration, repeat int, generator string) {
	fmt.Printf("Closed loop (%s), %d connections, %v per run, median of %d runs (min-max in brackets); %s.\n\n", generator, conns, dur, repeat, time.Now().UTC().Format("2006-01-02 15:04 MST"))
	fmt.Println("CPU per request: the median of the runs' own (server: /proc/<pid>/stat; Redis: INFO cpu, user + system); spans/req are those the receiver decoded.")
	fmt.Println()
	fmt.Println("| path | server | req/s | vs plain | vs limit | p50 | p99 | server CPU/req | Redis CPU/req | script calls/req | Redis commands/req | spans/req | OTLP bytes/req |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	rps := func(name string, p load.Keys) float64 {
		if results[name] == nil {
			return 0
		}
		c, _, _ := median(results[name][p])
		return c.res.RPS()
	}
	for _, path := range paths {
		plain, limit := rps("plain", path), rps("limit", path)
		for _, s := range chosen {
			c, lo, hi := median(results[s.name][path])
			cs := results[s.name][path]
			fmt.Printf("| %s | %s | %.0f (%.0f-%.0f) | %s | %s | %v | %v | %v | %s | %.2f | %.2f | %.2f | %.0f |\n",
				path, s.label, c.res.RPS(), lo, hi, pct(c.res.RPS(), plain), pct(c.res.RPS(), limit),
				round(c.res.P50), round(c.res.P99), round(medianCPU(cs, serverCPU)), micros(medianCPU(cs, redisCPUOf)),
				c.calls.trips, c.calls.commands, c.spans, c.exportBytes)
		}
	}
	fmt.Println()
	cpu := func(name string, p load.Keys) time.Duration {
		if results[name] == nil {
			return 0
		}
		return medianCPU(results[name][p], serverCPU)
	}
	// ratio is a's throughput over b's, and b's CPU per request over a's
	// (the same ratio if the CPU were the only limit; steadier on a shared
	// machine, where throughput moves with the other jobs).
	ratio := func(a, b string, p load.Keys) string {
		x, y := rps(a, p), rps(b, p)
		if x == 0 || y == 0 {
			return "n/a | n/a | n/a"
		}
		return fmt.Sprintf("%.2f | %.2f | %s", x/y, float64(cpu(b, p))/float64(cpu(a, p)), paired(results[a][p], results[b][p]))
	}
	fmt.Println("| target | req/s ratio (of the medians) | CPU/req ratio | paired req/s ratio: median (min-max) of each repeat's own |")
	fmt.Println("|---|---|---|---|")
	fmt.Println("| README stack, no key ≥ 0.90 × plain |", ratio("stack", "plain", load.None), "|")
	fmt.Println("| README stack, new key ≥ 0.85 × limit |", ratio("stack", "limit", load.Unique), "|")
	fmt.Println("| README stack, replay ≥ 0.85 × limit |", ratio("stack", "limit", load.One), "|")
	for _, p := range paths {
		fmt.Printf("| %s: tracing default ≥ 0.97 × no tracingfx | %s |\n", p, ratio("stack", "stack-notracing", p))
		fmt.Printf("| %s: OTLP 10 %% ≥ 0.95 × no tracingfx | %s |\n", p, ratio("stack-otlp10", "stack-notracing", p))
		fmt.Printf("| %s: OTLP 100 %% vs no tracingfx | %s |\n", p, ratio("stack-otlp100", "stack-notracing", p))
	}
	for _, p := range paths {
		fmt.Printf("| %s: README stack ≥ 1.2 × assembled (req/s) on every path | %s |\n", p, ratio("stack", "assembled", p))
		fmt.Printf("| %s: OTLP 10 %%, README stack vs assembled (for reference) | %s |\n", p, ratio("stack-otlp10", "assembled-otlp10", p))
	}
	fmt.Println("| README stack ≥ 0.80 × limit, new key (the regression floor) |", ratio("stack", "limit", load.Unique), "|")
	fmt.Println("| new key: one emitted event, CPU/req ≤ 1.10 × README stack (the CPU/req column ≥ 0.91) |", ratio("stack-emit", "stack", load.Unique), "|")
	for _, p := range paths {
		fmt.Printf("| %s: payments example vs README stack (for reference) | %s |\n", p, ratio("payments", "stack", p))
	}
	reportFloor(results, paths)
	reportCeiling(results, chosen)
}

// paired is the median, with the range, of the throughput ratios of a and
// b within each repeat. The servers of one repeat run back to back, so on a
// VM whose speed drifts between repeats (by up to 2x here) the ratio of one
// repeat is steadier than the ratio of two medians taken over all repeats.
func paired(a, b []cell) string {
	var rs []float64
	for i := range min(len(a), len(b)) {
		if y := b[i].res.RPS(); y > 0 {
			rs = append(rs, a[i].res.RPS()/y)
		}
	}
	if len(rs) == 0 {
		return "n/a"
	}
	sort.Float64s(rs)
	return fmt.Sprintf("%.2f (%.2f-%.2f)", rs[len(rs)/2], rs[0], rs[len(rs)-1])
}

func pct(x, of float64) string {
	if of == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f %%", 100*x/of)
}

func round(d time.Duration) time.Duration { return d.Round(time.Microsecond) }

// commandCalls sums calls over INFO commandstats: script calls, and all.
func commandCalls(rdb *redis.Client) (trips, total int64) {
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		log.Fatal(err)
	}
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		line := sc.Text()
		if i := strings.Index(line, "calls="); i >= 0 && !strings.HasPrefix(line, "cmdstat_info") {
			v := line[i+6:]
			if j := strings.IndexByte(v, ','); j >= 0 {
				v = v[:j]
			}
			n, _ := strconv.ParseInt(v, 10, 64)
			total += n
			if strings.HasPrefix(line, "cmdstat_evalsha:") || strings.HasPrefix(line, "cmdstat_eval:") {
				trips += n
			}
		}
	}
	return trips, total
}

// measureDown runs the README stack against a Redis that is then killed:
// new-key load on /payments, and /metrics and /readyz polled beside it,
// once the first failures are over (1 s after the kill), for each policy
// with the breaker on and off.
func measureDown(bin, dir string, conns int, dur time.Duration, repeat int) {
	body := `{"amount":1250,"currency":"EUR","card":"4242424242424242"}`
	fmt.Printf("Redis killed under load; README stack (tracing default); %d connections on /payments (new keys), 1 each on /metrics and /readyz; measured from 3 s after the kill for %v; median of %d; %s.\n\n",
		conns, dur, repeat, time.Now().UTC().Format("2006-01-02 15:04 MST"))
	fmt.Println("| policy | breaker | first 3 s: requests, slowest | /payments req/s | p50 | p99 | max | statuses | /metrics p50 / p99 | /readyz p50 / p99 | server CPU/req |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|")
	for _, policy := range []string{"fail-closed", "fail-open"} {
		for _, breaker := range []bool{true, false} {
			var runs []downRun
			for r := 0; r < repeat; r++ {
				runs = append(runs, downOnce(bin, dir, policy, breaker, conns, dur, body))
			}
			sort.Slice(runs, func(i, j int) bool { return runs[i].pay.P99 < runs[j].pay.P99 })
			m := runs[len(runs)/2]
			on := "off"
			if breaker {
				on = "on"
			}
			fmt.Printf("| %s | %s | %d, %v | %.0f | %v | %v | %v | %v | %v / %v | %v / %v | %v |\n", policy, on, m.first.Requests, round(m.first.Max), m.pay.RPS(),
				round(m.pay.P50), round(m.pay.P99), round(m.pay.Max), m.pay.Statuses,
				round(m.metrics.P50), round(m.metrics.P99), round(m.ready.P50), round(m.ready.P99), round(m.cpu))
		}
	}
}

type downRun struct {
	first, pay, metrics, ready load.Result
	cpu                        time.Duration
}

func downOnce(bin, dir, policy string, breaker bool, conns int, dur time.Duration, body string) downRun {
	rdir, err := os.MkdirTemp(dir, "redis")
	if err != nil {
		log.Fatal(err)
	}
	redisAddr, stopRedis := local.StartRedis(rdir)
	addr := local.FreeAddr()
	srv := exec.Command(bin, "-mode", "stack", "-addr", addr, "-redis", "redis://"+redisAddr,
		"-policy", policy, "-breaker="+strconv.FormatBool(breaker))
	srv.Env = serverEnv(nil, "")
	if err := srv.Start(); err != nil {
		log.Fatal(err)
	}
	defer func() { _ = srv.Process.Signal(os.Interrupt); _ = srv.Wait() }()
	local.WaitListening(addr)
	base := "http://" + addr
	ctx := context.Background()
	if _, err := load.Run(ctx, load.Options{URL: base + "/payments", Connections: conns, Duration: time.Second, Keys: load.Unique, Body: body, KeyPrefix: "warm-"}); err != nil {
		log.Fatal(err)
	}
	stopRedis()
	// The first failures: they wait for Redis (go-redis's dial retries,
	// up to StoreTimeout, 2 s by default); then the breaker opens.
	var out downRun
	out.first, _ = load.Run(ctx, load.Options{URL: base + "/payments", Connections: conns, Duration: 3 * time.Second, Keys: load.Unique, Body: body, KeyPrefix: "first-"})
	var wg sync.WaitGroup
	wg.Add(3)
	before := cpuTime(srv.Process.Pid)
	go func() {
		defer wg.Done()
		out.pay, _ = load.Run(ctx, load.Options{URL: base + "/payments", Connections: conns, Duration: dur, Keys: load.Unique, Body: body, KeyPrefix: "down-"})
	}()
	go func() {
		defer wg.Done()
		out.metrics, _ = load.Run(ctx, load.Options{URL: base + "/metrics", Method: http.MethodGet, Connections: 1, Duration: dur, Keys: load.None})
	}()
	go func() {
		defer wg.Done()
		out.ready, _ = load.Run(ctx, load.Options{URL: base + "/readyz", Method: http.MethodGet, Connections: 1, Duration: dur, Keys: load.None})
	}()
	wg.Wait()
	if n := out.pay.Requests + out.metrics.Requests + out.ready.Requests; n > 0 {
		out.cpu = (cpuTime(srv.Process.Pid) - before) / time.Duration(n)
	}
	fmt.Fprintf(os.Stderr, "down %s breaker=%v: %0.f req/s p99 %v statuses %v; metrics p99 %v; readyz p99 %v\n",
		policy, breaker, out.pay.RPS(), out.pay.P99, out.pay.Statuses, out.metrics.P99, out.ready.P99)
	return out
}
