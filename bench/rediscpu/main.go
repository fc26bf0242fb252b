// Command rediscpu measures Redis's CPU per request of the benchmark
// servers on the new-key and replay paths: INFO cpu (used_cpu_sys +
// used_cpu_user of a private redis-server) and INFO commandstats, diffed
// around each run, divided by the requests served. Servers run interleaved,
// each repeat starting with another; medians of the repeats are reported.
//
// A server is a benchserver mode, with more flags after a slash
// (limit/-spin=40), run from another module tree with @other.
//
//	go run ./bench/rediscpu -servers limit,stack -c 32 -d 5s -repeat 3
//	git archive main | tar -x -C /tmp/main
//	go run ./bench/rediscpu -servers limit,stack,limit@other,stack@other -other /tmp/main
//	taskset -c 0 go run ./bench/rediscpu -pin 1   # Redis on a core of its own
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/redisfx/redisfx/bench/internal/local"
	"github.com/redisfx/redisfx/bench/load"
)

func main() {
	conns := flag.Int("c", 32, "connections")
	dur := flag.Duration("d", 5e9, "duration of one run")
	repeat := flag.Int("repeat", 3, "repeats")
	only := flag.String("servers", "limit,stack", "benchserver modes")
	pathsFlag := flag.String("paths", "unique,one", "paths")
	other := flag.String("other", "", "a module directory whose benchserver the servers named mode@other run (another version, e.g. git archive main)")
	pin := flag.String("pin", "", "CPU list to pin redis-server to (taskset -c), e.g. 1 with the rest under taskset -c 0")
	warm := flag.Bool("warm", true, "warm each server up (pool, scripts) before measuring")
	flag.Parse()
	dir, err := os.MkdirTemp("", "rediscpu")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "benchserver")
	if out, err := exec.Command("go", "build", "-o", bin, "./bench/benchserver").CombinedOutput(); err != nil {
		log.Fatalf("build: %v\n%s", err, out)
	}
	otherBin := filepath.Join(dir, "benchserver-other")
	if *other != "" {
		build := exec.Command("go", "build", "-o", otherBin, "./bench/benchserver")
		build.Dir = *other
		if out, err := build.CombinedOutput(); err != nil {
			log.Fatalf("build %s: %v\n%s", *other, err, out)
		}
	}
	redisAddr, stop := local.StartRedis(dir)
	defer stop()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr, DisableIdentity: true})
	ctx := context.Background()
	if *pin != "" {
		info, err := rdb.Info(ctx, "server").Result()
		if err != nil {
			log.Fatal(err)
		}
		_, pid, _ := strings.Cut(info, "process_id:")
		pid, _, _ = strings.Cut(pid, "\r\n")
		if out, err := exec.Command("taskset", "-a", "-p", "-c", *pin, pid).CombinedOutput(); err != nil {
			log.Fatalf("taskset: %v %s", err, out)
		}
	}
	servers := strings.Split(*only, ",")
	var paths []load.Keys
	for _, p := range strings.Split(*pathsFlag, ",") {
		paths = append(paths, load.Keys(p))
	}
	drive := load.Run
	if load.WrkAvailable() {
		drive = load.RunWrk
	}
	type run struct {
		cpu   float64 // µs per request
		cmds  map[string]float64
		usec  map[string]float64
		total float64
		rps   float64
		srv   float64 // the server's CPU, µs per request
	}
	results := map[string][]run{}
	body := `{"amount":1250,"currency":"EUR","card":"4242424242424242"}`
	for r := 0; r < *repeat; r++ {
		for _, path := range paths {
			for i := range servers {
				mode := servers[(i+r)%len(servers)]
				addr := local.FreeAddr()
				prefix := fmt.Sprintf("bench:%s:%s:%d:", mode, path, r)
				exe := bin
				m, isOther := strings.CutSuffix(mode, "@other")
				if isOther {
					exe = otherBin
				}
				m, extra, _ := strings.Cut(m, "/") // limit/-spin=40: more flags
				args := []string{"-mode", m, "-addr", addr, "-redis", "redis://" + redisAddr, "-prefix", strings.ReplaceAll(prefix, "/", "")}
				if extra != "" {
					args = append(args, extra)
				}
				srv := exec.Command(exe, args...)
				if err := srv.Start(); err != nil {
					log.Fatal(err)
				}
				local.WaitListening(addr)
				// Warm: the connection pool and scripts.
				if *warm {
					if _, err := load.Run(ctx, load.Options{URL: "http://" + addr + "/payments", Connections: *conns, Duration: 5e8, Keys: path, Body: body, KeyPrefix: "warm-" + prefix}); err != nil {
						log.Fatal(err)
					}
				}
				cpu0, calls0, usec0 := stats(rdb)
				srv0 := procCPU(srv.Process.Pid)
				res, err := drive(ctx, load.Options{URL: "http://" + addr + "/payments", Connections: *conns, Duration: *dur, Keys: path, Body: body, KeyPrefix: prefix})
				cpu1, calls1, usec1 := stats(rdb)
				srvCPU := procCPU(srv.Process.Pid) - srv0
				_ = srv.Process.Signal(os.Interrupt)
				_ = srv.Wait()
				if err != nil {
					log.Fatal(err)
				}
				n := float64(res.Requests)
				x := run{cpu: (cpu1 - cpu0) / n, cmds: map[string]float64{}, usec: map[string]float64{}, rps: res.RPS(), srv: srvCPU / n}
				for k, v := range calls1 {
					if d := float64(v - calls0[k]); d > 0 {
						x.cmds[k] = d / n
						x.total += d / n
						x.usec[k] = (usec1[k] - usec0[k]) / n
					}
				}
				results[mode+" "+string(path)] = append(results[mode+" "+string(path)], x)
				fmt.Fprintf(os.Stderr, "%-8s %-7s run %d: %7.0f req/s  server cpu %.0f µs/req  redis cpu %.1f µs/req  cmds/req %.2f %v\n", mode, path, r+1, x.rps, x.srv, x.cpu, x.total, fmtMap(x.cmds, x.usec))
			}
		}
	}
	for _, path := range paths {
		for _, mode := range servers {
			rs := results[mode+" "+string(path)]
			cpus := make([]float64, len(rs))
			for i, x := range rs {
				cpus[i] = x.cpu
			}
			sort.Float64s(cpus)
			fmt.Printf("%-8s %-7s redis cpu/req median %.1f µs (all %v)\n", mode, path, cpus[len(cpus)/2], cpus)
		}
		for i := 1; i < len(servers); i += 2 { // pairs: limit,stack[,limit@other,stack@other]
			var rs []float64
			for r := 0; r < *repeat; r++ {
				a, b := results[servers[i]+" "+string(path)][r], results[servers[i-1]+" "+string(path)][r]
				rs = append(rs, a.cpu/b.cpu)
			}
			sort.Float64s(rs)
			fmt.Printf("  %s/%s per repeat %.2f, median %.2f\n", servers[i], servers[i-1], rs, rs[len(rs)/2])
		}
	}
}

func fmtMap(m, u map[string]float64) string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	var b strings.Builder
	for _, k := range ks {
		fmt.Fprintf(&b, "%s=%.2f(%.1fµs) ", k, m[k], u[k])
	}
	return b.String()
}

// stats reads used CPU (µs) and commandstats calls and usec.
func stats(rdb *redis.Client) (float64, map[string]int64, map[string]float64) {
	info, err := rdb.Info(context.Background(), "cpu", "commandstats").Result()
	if err != nil {
		log.Fatal(err)
	}
	var cpu float64
	calls, usec := map[string]int64{}, map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if v, ok := strings.CutPrefix(line, "used_cpu_sys:"); ok {
			f, _ := strconv.ParseFloat(v, 64)
			cpu += f * 1e6
		}
		if v, ok := strings.CutPrefix(line, "used_cpu_user:"); ok {
			f, _ := strconv.ParseFloat(v, 64)
			cpu += f * 1e6
		}
		if rest, ok := strings.CutPrefix(line, "cmdstat_"); ok {
			name, fields, _ := strings.Cut(rest, ":")
			if name == "info" {
				continue
			}
			for _, f := range strings.Split(fields, ",") {
				k, v, _ := strings.Cut(f, "=")
				switch k {
				case "calls":
					calls[name], _ = strconv.ParseInt(v, 10, 64)
				case "usec":
					usec[name], _ = strconv.ParseFloat(v, 64)
				}
			}
		}
	}
	return cpu, calls, usec
}

// procCPU is the user+system CPU time (µs) the process used so far (Linux).
func procCPU(pid int) float64 {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	s := string(raw)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	return (utime + stime) * 1e6 / 100 // USER_HZ
}
