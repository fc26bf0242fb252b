// Command redisfx-alerts prints the Prometheus alerting rules for a metric
// prefix and scrape job, or their promtool tests, or the Alertmanager
// routing:
//
//	go run ./cmd/redisfx-alerts -prefix myapp -job myapp > rules.yml
//	go run ./cmd/redisfx-alerts -prefix myapp -job myapp -tests > rules_test.yml
//	go run ./cmd/redisfx-alerts -alertmanager > alertmanager.yml
//
// -speedup N divides every duration by N (windows, for, keep_firing_for,
// routing timings): the end-to-end test runs the real rules 60 times faster.
package main

import (
	"flag"
	"fmt"
	"os"
	"regexp"

	"github.com/redisfx/redisfx/metricsfx"
	"github.com/redisfx/redisfx/metricsfx/alerttest"
)

func main() {
	var p metricsfx.Profile
	var r metricsfx.Receivers
	flag.StringVar(&p.Prefix, "prefix", metricsfx.DefaultPrefix, "metric prefix of the application (metricsfx.Config.Prefix)")
	flag.StringVar(&p.Job, "job", "", "Prometheus scrape job of the application (default: the prefix)")
	flag.IntVar(&p.Speedup, "speedup", 1, "divide every duration by this (tests only; 1 in production)")
	tests := flag.Bool("tests", false, "print promtool unit tests for the rules instead")
	rules := flag.String("rules-file", "rules.yml", "rule file named in the tests")
	am := flag.Bool("alertmanager", false, "print the Alertmanager routing instead")
	flag.StringVar(&r.Pager, "pager-url", "", "webhook of the pager receiver (default: a placeholder)")
	flag.StringVar(&r.Chat, "chat-url", "", "webhook of the chat receiver (default: a placeholder)")
	flag.StringVar(&r.Default, "default-url", "", "webhook of the default receiver (default: none)")
	flag.Parse()
	switch {
	case !metricsfx.ValidPrefix(p.Prefix):
		fail("invalid -prefix %q: not a Prometheus name", p.Prefix)
	case p.Job != "" && !regexp.MustCompile(`^[^"\\]+$`).MatchString(p.Job):
		fail("invalid -job %q: quotes and backslashes are not allowed", p.Job)
	case p.Speedup < 1:
		fail("invalid -speedup %d: must be at least 1", p.Speedup)
	}
	switch {
	case *am:
		_, _ = os.Stdout.Write(metricsfx.AlertmanagerConfig(p, r))
	case *tests:
		_, _ = os.Stdout.Write(alerttest.Tests(p, *rules))
	default:
		_, _ = os.Stdout.Write(metricsfx.AlertRules(p))
	}
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(2)
}
