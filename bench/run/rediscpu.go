package main

import (
	"bufio"
	"context"
	"log"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisCPU is the CPU time (user and system, all its threads) the
// redis-server used so far, from INFO cpu: microseconds, where
// /proc/<pid>/stat counts in ticks of 10 ms. The INFO calls themselves
// cost Redis a few microseconds per cell, nothing per request.
func redisCPU(rdb *redis.Client) time.Duration {
	info, err := rdb.Info(context.Background(), "cpu").Result()
	if err != nil {
		log.Fatal(err)
	}
	var total float64
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		if ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
			f, _ := strconv.ParseFloat(v, 64)
			total += f
		}
	}
	return time.Duration(total * float64(time.Second))
}
