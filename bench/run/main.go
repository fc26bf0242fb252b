// Command run is `make bench`: it starts a private redis-server, builds the
// benchmark server, measures plain, limit and redisfx on the three paths
// (new key, replay, no key) with the closed-loop load generator, repeats
// each cell, and prints one Markdown table with ratios and spreads.
//
//	go run ./bench/run -c 32 -d 5s -repeat 3
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
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisfx/redisfx/bench/internal/local"
	"github.com/redisfx/redisfx/bench/load"
)

func main() {
	conns := flag.Int("c", 32, "connections")
	dur := flag.Duration("d", 5*time.Second, "duration of one measurement")
	repeat := flag.Int("repeat", 3, "measurements per cell (the median is reported)")
	flag.Parse()

	dir, err := os.MkdirTemp("", "redisfx-bench")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "benchserver")
	if out, err := exec.Command("go", "build", "-o", bin, "./bench/benchserver").CombinedOutput(); err != nil {
		log.Fatalf("build: %v\n%s", err, out)
	}
	redisAddr, stopRedis := local.StartRedis(dir)
	defer stopRedis()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr, DisableIdentity: true})
	defer rdb.Close()

	body := `{"amount":1250,"currency":"EUR","card":"4242424242424242"}`
	modes := []string{"plain", "limit", "redisfx"}
	paths := []load.Keys{load.Unique, load.One, load.None}
	results := map[string]map[load.Keys][]cell{}
	for _, mode := range modes {
		results[mode] = map[load.Keys][]cell{}
		for _, path := range paths {
			for r := 0; r < *repeat; r++ {
				addr := local.FreeAddr()
				srv := exec.Command(bin, "-mode", mode, "-addr", addr, "-redis", "redis://"+redisAddr,
					"-prefix", fmt.Sprintf("bench:%s:%s:%d:", mode, path, r))
				if err := srv.Start(); err != nil {
					log.Fatal(err)
				}
				local.WaitListening(addr)
				beforeTrips, beforeAll := commandCalls(rdb)
				res, err := load.Run(context.Background(), load.Options{URL: "http://" + addr + "/payments",
					Connections: *conns, Duration: *dur, Keys: path, Body: body,
					KeyPrefix: fmt.Sprintf("%s-%d-", path, r)})
				afterTrips, afterAll := commandCalls(rdb)
				_ = srv.Process.Signal(os.Interrupt)
				_ = srv.Wait()
				if err != nil {
					log.Fatalf("%s %s: %v", mode, path, err)
				}
				n := float64(res.Requests)
				results[mode][path] = append(results[mode][path], cell{res, stats{float64(afterTrips-beforeTrips) / n, float64(afterAll-beforeAll) / n}})
				fmt.Fprintf(os.Stderr, "%-8s %-7s run %d: %8.0f req/s p50 %v p99 %v errors %d statuses %v\n",
					mode, path, r+1, res.RPS(), res.P50, res.P99, res.Errors, res.Statuses)
			}
		}
	}
	report(results, modes, paths, *conns, *dur, *repeat)
}

type cell struct {
	res   load.Result
	calls stats // per request
}

// stats are INFO commandstats deltas per request: round trips (script
// calls, as the servers send nothing else on the request path) and every
// command Redis executed, those inside scripts included.
type stats struct{ trips, commands float64 }

func median(cs []cell) (cell, float64, float64) {
	sort.Slice(cs, func(i, j int) bool { return cs[i].res.RPS() < cs[j].res.RPS() })
	return cs[len(cs)/2], cs[0].res.RPS(), cs[len(cs)-1].res.RPS()
}

func report(results map[string]map[load.Keys][]cell, modes []string, paths []load.Keys, conns int, dur time.Duration, repeat int) {
	fmt.Printf("Closed loop, %d connections, %v per run, median of %d runs (min-max in brackets); %s.\n\n", conns, dur, repeat, time.Now().UTC().Format("2006-01-02"))
	fmt.Println("| path | server | req/s | vs plain | vs limit | p50 | p90 | p99 | max | round trips/req | Redis cmds/req |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|")
	for _, path := range paths {
		plain, _, _ := median(results["plain"][path])
		limit, _, _ := median(results["limit"][path])
		for _, mode := range modes {
			c, lo, hi := median(results[mode][path])
			fmt.Printf("| %s | %s | %.0f (%.0f-%.0f) | %.0f %% | %.0f %% | %v | %v | %v | %v | %.2f | %.2f |\n",
				path, mode, c.res.RPS(), lo, hi, 100*c.res.RPS()/plain.res.RPS(), 100*c.res.RPS()/limit.res.RPS(),
				round(c.res.P50), round(c.res.P90), round(c.res.P99), round(c.res.Max), c.calls.trips, c.calls.commands)
		}
	}
	fmt.Println()
	fmt.Println("Added p50 latency, new key: redisfx over plain", round(med(results, "redisfx", load.Unique).res.P50-med(results, "plain", load.Unique).res.P50),
		"; limit over plain", round(med(results, "limit", load.Unique).res.P50-med(results, "plain", load.Unique).res.P50))
}

func med(r map[string]map[load.Keys][]cell, m string, p load.Keys) cell {
	c, _, _ := median(append([]cell(nil), r[m][p]...))
	return c
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
