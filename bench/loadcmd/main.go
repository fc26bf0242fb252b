// Command loadcmd runs the closed-loop load generator once against a URL:
//
//	go run ./bench/loadcmd -url http://127.0.0.1:9000/payments -c 32 -d 5s -keys unique
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"time"

	"github.com/redisfx/redisfx/bench/load"
)

func main() {
	url := flag.String("url", "http://127.0.0.1:9000/payments", "target")
	c := flag.Int("c", 32, "connections")
	d := flag.Duration("d", 5*time.Second, "duration")
	keys := flag.String("keys", "unique", "unique, one or none")
	prefix := flag.String("prefix", fmt.Sprint(time.Now().UnixNano(), "-"), "key prefix")
	flag.Parse()
	res, err := load.Run(context.Background(), load.Options{URL: *url, Connections: *c, Duration: *d, Keys: load.Keys(*keys),
		Body: `{"amount":1250,"currency":"EUR","card":"4242424242424242"}`, KeyPrefix: *prefix})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%.0f req/s  p50 %v  p90 %v  p99 %v  max %v  errors %d  statuses %v\n",
		res.RPS(), res.P50, res.P90, res.P99, res.Max, res.Errors, res.Statuses)
}
