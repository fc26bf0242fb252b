package main

import (
	"fmt"
	"time"

	"github.com/redisfx/redisfx/bench/load"
)

// reportCeiling gives, for each server that talks to Redis, the requests
// per second one Redis (one Cluster shard: a single-threaded server) can
// serve on the new-key and replay paths: one second of Redis CPU over its
// CPU per request. Measured below Redis's saturation, where each event
// loop iteration serves fewer commands than at the ceiling, so the figure
// is a floor of what one Redis core serves.
func reportCeiling(results map[string]map[load.Keys][]cell, chosen []server) {
	fmt.Println()
	fmt.Println("| server | Redis CPU per new key | new keys/s per Redis | Redis CPU per replay | replays/s per Redis |")
	fmt.Println("|---|---|---|---|---|")
	per := func(name string, p load.Keys) (string, string) {
		d := medianCPU(results[name][p], redisCPUOf)
		if d <= 0 {
			return "n/a", "n/a"
		}
		return micros(d), fmt.Sprintf("%.0f", float64(time.Second)/float64(d))
	}
	for _, s := range chosen {
		if c := results[s.name][load.Unique]; len(c) == 0 || c[0].calls.trips == 0 {
			continue // no Redis on the request path
		}
		nk, nks := per(s.name, load.Unique)
		rp, rps := per(s.name, load.One)
		fmt.Printf("| %s | %s | %s | %s | %s |\n", s.label, nk, nks, rp, rps)
	}
}
