package main

import (
	"fmt"
	"sort"
	"time"

	"github.com/redisfx/redisfx/bench/load"
)

// reportFloor compares the server CPU that tracing at 10 % adds to a
// request in the README stack (stack-otlp10 over stack-notracing) with what
// it adds on the SDK floor (sdk-floor over nethttp: the same spans made
// with the bare OpenTelemetry SDK on bare net/http). Each is a difference
// of medians; the paired column is the median of each repeat's own ratio.
func reportFloor(results map[string]map[load.Keys][]cell, paths []load.Keys) {
	for _, n := range []string{"stack-otlp10", "stack-notracing", "sdk-floor", "nethttp"} {
		if results[n] == nil {
			return
		}
	}
	fmt.Println()
	fmt.Println("| path | SDK floor: added server CPU/req (sdk-floor − nethttp) | tracingfx: added server CPU/req (stack-otlp10 − stack-notracing) | tracingfx / floor, target ≤ 1.10 | paired: median (min-max) of each repeat's ratio |")
	fmt.Println("|---|---|---|---|---|")
	for _, p := range paths {
		added := func(traced, bare string) time.Duration {
			return medianCPU(results[traced][p], serverCPU) - medianCPU(results[bare][p], serverCPU)
		}
		floor, ours := added("sdk-floor", "nethttp"), added("stack-otlp10", "stack-notracing")
		var rs []float64
		for i := range min(len(results["sdk-floor"][p]), len(results["nethttp"][p]), len(results["stack-otlp10"][p]), len(results["stack-notracing"][p])) {
			f := results["sdk-floor"][p][i].cpu - results["nethttp"][p][i].cpu
			o := results["stack-otlp10"][p][i].cpu - results["stack-notracing"][p][i].cpu
			if f > 0 {
				rs = append(rs, float64(o)/float64(f))
			}
		}
		sort.Float64s(rs)
		paired := "n/a"
		if len(rs) > 0 {
			paired = fmt.Sprintf("%.2f (%.2f-%.2f)", rs[len(rs)/2], rs[0], rs[len(rs)-1])
		}
		ratio := "n/a"
		if floor > 0 {
			ratio = fmt.Sprintf("%.2f", float64(ours)/float64(floor))
		}
		fmt.Printf("| %s | %s | %s | %s | %s |\n", p, micros(floor), micros(ours), ratio, paired)
	}
}

func serverCPU(c cell) time.Duration  { return c.cpu }
func redisCPUOf(c cell) time.Duration { return c.redisCPU }

// medianCPU is the median of one CPU figure over the runs of a cell.
func medianCPU(cs []cell, of func(cell) time.Duration) time.Duration {
	if len(cs) == 0 {
		return 0
	}
	ds := make([]time.Duration, len(cs))
	for i, c := range cs {
		ds[i] = of(c)
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ds[len(ds)/2]
}

// micros writes d in microseconds with one decimal.
func micros(d time.Duration) string {
	return fmt.Sprintf("%.1fµs", float64(d)/float64(time.Microsecond))
}
